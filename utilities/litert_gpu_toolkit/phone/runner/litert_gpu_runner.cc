// litert_gpu_runner: the on-phone half of litert_gpu_toolkit's runner protocol
// (see ../protocol.py). Compiles JOB/model.tflite for the GPU accelerator ONLY (no CPU
// fallback), runs one signature `repeats` times, writes raw outputs + result.json.
// Protocol version 2: names in manifest.txt are percent-encoded, tensor files are named by position.
//
//   litert_gpu_runner --manifest JOB/manifest.txt --out JOB/out
//
// Status: written against the LiteRT 2.3 C++ SDK (CompiledModel API). It has NOT been compiled
// or run in this repository's CI (no Android NDK or phone there); the host-side protocol is
// tested against a test double of adb that runs the Python twin of this program
// (host_runner.py). If your SDK version names an API differently, the compiler will say where.
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "litert/cc/litert_compiled_model.h"
#include "litert/cc/litert_environment.h"
#include "litert/cc/litert_model.h"
#include "litert/cc/litert_options.h"
#include "litert/cc/litert_tensor_buffer.h"

namespace {

struct Input {
  std::string name, dtype, file;
  std::vector<int> shape;
};

struct Manifest {
  std::string signature;
  bool enforce_f32 = false;
  int repeats = 1;
  std::vector<Input> inputs;
};

std::string Dir(const std::string& path) {
  auto pos = path.rfind('/');
  return pos == std::string::npos ? "." : path.substr(0, pos);
}

// A manifest.txt name field: every byte outside [A-Za-z0-9._-] is written as %XX (protocol.py).
bool DecodeName(const std::string& field, std::string* out) {
  out->clear();
  if (field.empty()) return false;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] != '%') { out->push_back(field[i]); continue; }
    if (i + 2 >= field.size() || !isxdigit(static_cast<unsigned char>(field[i + 1])) ||
        !isxdigit(static_cast<unsigned char>(field[i + 2]))) return false;
    out->push_back(static_cast<char>(std::stoi(field.substr(i + 1, 2), nullptr, 16)));
    i += 2;
  }
  return true;
}

// Fields are separated by single spaces; names never contain one (they are percent-encoded).
std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> fields;
  std::istringstream ss(line);
  for (std::string f; std::getline(ss, f, ' ');) fields.push_back(f);
  return fields;
}

bool ReadManifest(const std::string& path, Manifest* m, std::string* err) {
  std::ifstream in(path);
  if (!in) { *err = "cannot open " + path; return false; }
  std::string line;
  int version = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto f = Fields(line);
    const std::string& key = f[0];
    bool ok = true;
    if (key == "version" && f.size() == 2) version = std::atoi(f[1].c_str());
    else if (key == "signature" && f.size() == 2) ok = DecodeName(f[1], &m->signature);
    else if (key == "enforce_f32" && f.size() == 2) m->enforce_f32 = f[1] == "1";
    else if (key == "repeats" && f.size() == 2) m->repeats = std::max(1, std::atoi(f[1].c_str()));
    else if (key == "input" && f.size() == 5) {
      Input i;
      ok = DecodeName(f[1], &i.name);
      i.dtype = f[2];
      // tensor files are chosen by position, never by the manifest: refuse anything but in_<i>.raw
      i.file = "in_" + std::to_string(m->inputs.size()) + ".raw";
      ok = ok && f[3] == i.file;
      std::istringstream ds(f[4]);
      for (std::string d; std::getline(ds, d, ',');) if (d != "-") i.shape.push_back(std::atoi(d.c_str()));
      m->inputs.push_back(i);
    } else ok = false;
    if (!ok) { *err = "bad manifest line: " + line.substr(0, 80); return false; }
  }
  if (version != 2) { *err = "manifest version " + std::to_string(version) + " != 2"; return false; }
  if (m->signature.empty()) { *err = "manifest has no signature"; return false; }
  return true;
}

// A JSON string literal: quote, backslash and control characters escaped (names are the model's own).
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  char buf[8];
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') { out += '\\'; out += static_cast<char>(c); }
    else if (c < 0x20) { std::snprintf(buf, sizeof(buf), "\\u%04x", c); out += buf; }
    else out += static_cast<char>(c);
  }
  return out + "\"";
}

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteResult(const std::string& out_dir, const std::string& status, const std::string& error,
                 double compile_ms, const std::vector<double>& run_ms, const std::string& outputs_json) {
  std::ofstream f(out_dir + "/result.json");
  f << "{\"status\": \"" << status << "\", \"error\": " << (error.empty() ? "null" : JsonString(error))
    << ", \"compile_ms\": " << compile_ms << ", \"run_ms\": [";
  for (size_t i = 0; i < run_ms.size(); ++i) f << (i ? ", " : "") << run_ms[i];
  f << "], \"outputs\": [" << outputs_json << "]}\n";
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string manifest_path, out_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--manifest") manifest_path = argv[i + 1];
    else if (flag == "--out") out_dir = argv[i + 1];
  }
  if (manifest_path.empty() || out_dir.empty()) {
    std::cerr << "usage: litert_gpu_runner --manifest JOB/manifest.json --out JOB/out\n";
    return 2;
  }
  // The host passes manifest.json; this program reads its line-format twin beside it.
  std::string job = Dir(manifest_path);
  mkdir(out_dir.c_str(), 0755);
  Manifest m;
  std::string err;
  if (!ReadManifest(job + "/manifest.txt", &m, &err)) {
    WriteResult(out_dir, "bad_request", err, 0, {}, "");
    return 2;
  }

  auto env = litert::Environment::Create({});
  auto model = litert::Model::CreateFromFile(job + "/model.tflite");
  auto options = litert::Options::Create();
  if (!env || !model || !options) {
    WriteResult(out_dir, "compile_failed", "environment/model/options creation failed", 0, {}, "");
    return 1;
  }
  options->SetHardwareAccelerators(litert::HwAccelerators::kGpu);  // GPU only: no CPU fallback
  if (m.enforce_f32) {
    auto gpu = options->GetGpuOptions();
    if (gpu) gpu->SetPrecision(litert::GpuOptions::Precision::kFp32);
  }
  auto t0 = std::chrono::steady_clock::now();
  auto compiled = litert::CompiledModel::Create(*env, *model, *options);
  double compile_ms = MsSince(t0);
  if (!compiled) {
    std::cerr << "compile failed: " << compiled.Error().Message() << "\n";
    WriteResult(out_dir, "compile_failed", compiled.Error().Message(), compile_ms, {}, "");
    return 1;
  }
  auto sig_index = compiled->GetSignatureIndex(m.signature);
  auto in_bufs = compiled->CreateInputBuffers(*sig_index);
  auto out_bufs = compiled->CreateOutputBuffers(*sig_index);
  if (!sig_index || !in_bufs || !out_bufs) {
    WriteResult(out_dir, "run_failed", "signature or buffers not available", compile_ms, {}, "");
    return 1;
  }
  auto sig = model->GetSignature(*sig_index);
  auto input_names = sig->InputNames();
  for (size_t pos = 0; pos < input_names.size(); ++pos) {
    const Input* match = nullptr;
    for (const auto& i : m.inputs) if (i.name == std::string(input_names[pos])) match = &i;
    if (!match) {
      WriteResult(out_dir, "bad_request", "no data for input " + std::string(input_names[pos]), compile_ms, {}, "");
      return 2;
    }
    auto bytes = ReadFile(job + "/" + match->file);
    (*in_bufs)[pos].Write<char>(absl::MakeConstSpan(bytes.data(), bytes.size()));
  }
  std::vector<double> run_ms;
  for (int r = 0; r < m.repeats; ++r) {
    auto t1 = std::chrono::steady_clock::now();
    auto ok = compiled->Run(*sig_index, *in_bufs, *out_bufs);
    if (!ok) {
      WriteResult(out_dir, "run_failed", ok.Error().Message(), compile_ms, run_ms, "");
      return 1;
    }
    // reading back synchronises the GPU, so the time covers the whole run
    std::vector<char> sink((*out_bufs)[0].PackedSize().Value());
    (*out_bufs)[0].Read<char>(absl::MakeSpan(sink));
    run_ms.push_back(MsSince(t1));
  }
  auto output_names = sig->OutputNames();
  std::ostringstream outputs_json;
  for (size_t pos = 0; pos < output_names.size(); ++pos) {
    auto& buf = (*out_bufs)[pos];
    auto type = buf.TensorType();
    std::vector<char> data(buf.PackedSize().Value());
    buf.Read<char>(absl::MakeSpan(data));
    std::string file = "out_" + std::to_string(pos) + ".raw";
    std::ofstream(out_dir + "/" + file, std::ios::binary).write(data.data(), data.size());
    outputs_json << (pos ? ", " : "") << "{\"name\": " << JsonString(std::string(output_names[pos]))
                 << ", \"dtype\": \""
                 << (type->ElementType() == litert::ElementType::Float32 ? "float32" : "int32")
                 << "\", \"shape\": [";
    auto dims = type->Layout().Dimensions();
    for (size_t d = 0; d < dims.size(); ++d) outputs_json << (d ? ", " : "") << dims[d];
    outputs_json << "], \"file\": \"" << file << "\"}";
  }
  WriteResult(out_dir, "ok", "", compile_ms, run_ms, outputs_json.str());
  return 0;
}
