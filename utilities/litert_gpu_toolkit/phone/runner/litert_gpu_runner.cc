// litert_gpu_runner: the native half of litert_gpu_toolkit's runner protocol (see ../protocol.py and
// ../README.md). One source for this machine (`--device host-native`) and for an Android phone.
//
//   litert_gpu_runner --manifest JOB/manifest.json --out JOB/out [--cache-dir DIR]
//
// --cache-dir turns on the GPU program cache in DIR (an existing folder): the first compile of a model writes
// its compiled programs there, later compiles read them. The key is a hash of the model's bytes and the precision.
//
// It compiles JOB/model.tflite once -- GPU only with no CPU fallback (or the CPU on request) --
// records the runtime's own residency facts, runs every entry of the manifest (a signature and
// its raw inputs) `repeats` times, and writes JOB/out/result.json plus one raw file per output.
// Everything LiteRT logs goes to stderr, which the host keeps (it holds the residency lines).
//
// Written against LiteRT's C API only (declarations in litert_c_api.h), so it links against the
// libLiteRt.so of the pip wheel on a host and of the Android release on a phone.
//
// Hardening: the manifest is untrusted input. Names are JSON strings compared byte for byte with
// the model's names and never used to build a path; every file the runner touches is named by
// the runner from indices (in_<entry>_<input>.raw, out_<entry>_<output>.raw); sizes come from the
// model and must match the files exactly. Any malformed request ends in result.json with status
// "bad_request" and exit status 2, never in a crash.
//
// Exit status: 0 ok; 1 the model failed to compile or run (see result.json and stderr);
// 2 bad request (usage, manifest, inputs); 3 the result could not be written.
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "litert_c_api.h"

static_assert(sizeof(RunnerLiteRtEnvOption) == 24, "LiteRtEnvOption is 24 bytes in the C ABI");
static_assert(sizeof(RunnerLiteRtRankedTensorType) == 72, "LiteRtRankedTensorType is 72 bytes in the C ABI");

namespace {

constexpr int kExitOk = 0;
constexpr int kExitModelFailed = 1;
constexpr int kExitBadRequest = 2;
constexpr int kExitInternal = 3;

constexpr const char* kProtocol = "litert-gpu-runner";
constexpr int kProtocolVersion = 2;

// Limits on what a manifest may ask for: generous for real jobs, small enough that a hostile
// manifest cannot make the runner allocate or loop without bound.
constexpr size_t kMaxManifestBytes = 16u << 20;
constexpr int kMaxJsonDepth = 16;
constexpr size_t kMaxEntries = 100000;
constexpr size_t kMaxInputsPerEntry = 1024;
constexpr size_t kMaxNameBytes = 4096;
constexpr int64_t kMaxRepeats = 1000;
constexpr int kMaxRank = 8;
// An entry whose signature is "<family>*" asks for a shape bucket: of the signatures whose key starts with the
// family, the smallest whose every input holds the entry's (same rank, no dimension smaller), each input padded at
// the end of every dimension with zeros.
constexpr const char* kBucketFamilies[] = {"seq_", "img_", "audio_"};

// ---------------------------------------------------------------------------------------------
// A small JSON reader: exactly RFC 8259 (no comments, no trailing commas, no NaN), with a depth
// limit, duplicate keys refused, strings checked as UTF-8 and decoded. Written for this runner,
// so it holds only what the manifest needs.
// ---------------------------------------------------------------------------------------------
struct Json {
  enum Type { kNull, kBool, kNumber, kString, kArray, kObject } type = kNull;
  bool boolean = false;
  bool is_integer = false;  // a number written without fraction or exponent that fits in int64
  int64_t integer = 0;
  std::string text;                                  // kString
  std::vector<Json> items;                           // kArray
  std::vector<std::pair<std::string, Json>> fields;  // kObject, in file order

  const Json* Field(const char* key) const {
    for (const auto& f : fields)
      if (f.first == key) return &f.second;
    return nullptr;
  }
};

class JsonReader {
 public:
  JsonReader(const char* data, size_t size) : p_(data), end_(data + size) {}

  bool Parse(Json* out, std::string* error) {
    SkipSpace();
    if (!Value(out, 0)) {
      *error = error_;
      return false;
    }
    SkipSpace();
    if (p_ != end_) {
      *error = "unexpected text after the JSON value" + Where();
      return false;
    }
    return true;
  }

 private:
  const char* p_;
  const char* end_;
  std::string error_;
  const char* start_ = p_;

  std::string Where() const { return " (at byte " + std::to_string(p_ - start_) + ")"; }
  bool Fail(const std::string& why) {
    if (error_.empty()) error_ = why + Where();
    return false;
  }
  void SkipSpace() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool Literal(const char* word) {
    size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) return Fail("invalid literal");
    p_ += n;
    return true;
  }

  bool Value(Json* out, int depth) {
    if (depth > kMaxJsonDepth) return Fail("JSON nested too deeply");
    if (p_ >= end_) return Fail("unexpected end of the manifest");
    switch (*p_) {
      case '{': return Object(out, depth);
      case '[': return Array(out, depth);
      case '"': out->type = Json::kString; return String(&out->text);
      case 't': out->type = Json::kBool; out->boolean = true; return Literal("true");
      case 'f': out->type = Json::kBool; out->boolean = false; return Literal("false");
      case 'n': out->type = Json::kNull; return Literal("null");
      default: return Number(out);
    }
  }

  bool Object(Json* out, int depth) {
    out->type = Json::kObject;
    ++p_;  // '{'
    SkipSpace();
    if (p_ < end_ && *p_ == '}') { ++p_; return true; }
    while (true) {
      SkipSpace();
      if (p_ >= end_ || *p_ != '"') return Fail("expected a string key");
      std::string key;
      if (!String(&key)) return false;
      for (const auto& f : out->fields)
        if (f.first == key) return Fail("duplicate key \"" + key.substr(0, 64) + "\"");
      SkipSpace();
      if (p_ >= end_ || *p_ != ':') return Fail("expected ':'");
      ++p_;
      SkipSpace();
      out->fields.emplace_back(std::move(key), Json());
      if (!Value(&out->fields.back().second, depth + 1)) return false;
      SkipSpace();
      if (p_ < end_ && *p_ == ',') { ++p_; continue; }
      if (p_ < end_ && *p_ == '}') { ++p_; return true; }
      return Fail("expected ',' or '}'");
    }
  }

  bool Array(Json* out, int depth) {
    out->type = Json::kArray;
    ++p_;  // '['
    SkipSpace();
    if (p_ < end_ && *p_ == ']') { ++p_; return true; }
    while (true) {
      SkipSpace();
      out->items.emplace_back();
      if (!Value(&out->items.back(), depth + 1)) return false;
      SkipSpace();
      if (p_ < end_ && *p_ == ',') { ++p_; continue; }
      if (p_ < end_ && *p_ == ']') { ++p_; return true; }
      return Fail("expected ',' or ']'");
    }
  }

  static void PutUtf8(uint32_t cp, std::string* s) {
    if (cp < 0x80) {
      s->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      s->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s->push_back(static_cast<char>(0xF0 | (cp >> 18)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  bool Hex4(uint32_t* v) {
    if (end_ - p_ < 4) return Fail("truncated \\u escape");
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = *p_++;
      *v <<= 4;
      if (c >= '0' && c <= '9') *v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') *v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') *v |= static_cast<uint32_t>(c - 'A' + 10);
      else return Fail("bad hex digit in \\u escape");
    }
    return true;
  }

  // One UTF-8 sequence starting at p_ (first byte >= 0x80), copied if well formed.
  bool Utf8Sequence(std::string* s) {
    const unsigned char* u = reinterpret_cast<const unsigned char*>(p_);
    size_t left = static_cast<size_t>(end_ - p_);
    unsigned char b0 = u[0];
    size_t n;
    uint32_t cp;
    if (b0 >= 0xC2 && b0 <= 0xDF) { n = 2; cp = b0 & 0x1F; }
    else if (b0 >= 0xE0 && b0 <= 0xEF) { n = 3; cp = b0 & 0x0F; }
    else if (b0 >= 0xF0 && b0 <= 0xF4) { n = 4; cp = b0 & 0x07; }
    else return Fail("invalid UTF-8 in a string");
    if (left < n) return Fail("truncated UTF-8 in a string");
    for (size_t i = 1; i < n; ++i) {
      if ((u[i] & 0xC0) != 0x80) return Fail("invalid UTF-8 in a string");
      cp = (cp << 6) | (u[i] & 0x3F);
    }
    // refuse overlong forms, surrogates and code points past U+10FFFF
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return Fail("invalid UTF-8 in a string");
    s->append(p_, n);
    p_ += n;
    return true;
  }

  bool String(std::string* s) {
    ++p_;  // opening quote
    s->clear();
    while (true) {
      if (p_ >= end_) return Fail("unterminated string");
      unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') { ++p_; return true; }
      if (s->size() > kMaxNameBytes) return Fail("string longer than " + std::to_string(kMaxNameBytes) + " bytes");
      if (c < 0x20) return Fail("control character inside a string (escape it)");
      if (c >= 0x80) {
        if (!Utf8Sequence(s)) return false;
        continue;
      }
      ++p_;
      if (c != '\\') { s->push_back(static_cast<char>(c)); continue; }
      if (p_ >= end_) return Fail("unterminated escape");
      char e = *p_++;
      switch (e) {
        case '"': s->push_back('"'); break;
        case '\\': s->push_back('\\'); break;
        case '/': s->push_back('/'); break;
        case 'b': s->push_back('\b'); break;
        case 'f': s->push_back('\f'); break;
        case 'n': s->push_back('\n'); break;
        case 'r': s->push_back('\r'); break;
        case 't': s->push_back('\t'); break;
        case 'u': {
          uint32_t cp = 0;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return Fail("lone low surrogate in \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low = 0;
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return Fail("lone high surrogate in \\u escape");
            p_ += 2;
            if (!Hex4(&low)) return false;
            if (low < 0xDC00 || low > 0xDFFF) return Fail("bad surrogate pair in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          PutUtf8(cp, s);
          break;
        }
        default: return Fail("unknown escape in a string");
      }
    }
  }

  bool Number(Json* out) {
    out->type = Json::kNumber;
    bool negative = false;
    if (p_ < end_ && *p_ == '-') { negative = true; ++p_; }
    if (p_ >= end_ || *p_ < '0' || *p_ > '9') return Fail("invalid value");
    bool fits = true;
    uint64_t magnitude = 0;
    if (*p_ == '0') {
      ++p_;
    } else {
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
        uint64_t digit = static_cast<uint64_t>(*p_ - '0');
        if (magnitude > (UINT64_MAX - digit) / 10) fits = false;
        else magnitude = magnitude * 10 + digit;
        ++p_;
      }
    }
    bool integral = true;
    if (p_ < end_ && *p_ == '.') {
      integral = false;
      ++p_;
      if (p_ >= end_ || *p_ < '0' || *p_ > '9') return Fail("digit expected after '.'");
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      integral = false;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ >= end_ || *p_ < '0' || *p_ > '9') return Fail("digit expected in exponent");
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    const uint64_t limit = negative ? static_cast<uint64_t>(INT64_MAX) + 1 : static_cast<uint64_t>(INT64_MAX);
    if (integral && fits && magnitude <= limit) {
      out->is_integer = true;
      out->integer = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
    }
    return true;
  }
};

// ---------------------------------------------------------------------------------------------
// The request
// ---------------------------------------------------------------------------------------------
struct DType {
  const char* name;
  int element_type;
  size_t size;
};
constexpr DType kDTypes[] = {
    {"float32", kRunnerElFloat32, 4}, {"float16", kRunnerElFloat16, 2}, {"int32", kRunnerElInt32, 4},
    {"int64", kRunnerElInt64, 8},     {"int16", kRunnerElInt16, 2},     {"int8", kRunnerElInt8, 1},
    {"uint8", kRunnerElUInt8, 1},     {"bool", kRunnerElBool, 1},
};

const DType* DTypeByName(const std::string& name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}
const DType* DTypeByElement(int element_type) {
  for (const auto& d : kDTypes)
    if (element_type == d.element_type) return &d;
  return nullptr;
}

struct InputSpec {
  std::string name;
  const DType* dtype = nullptr;
  std::vector<int64_t> shape;
};
struct Entry {
  std::string signature;
  std::vector<InputSpec> inputs;
};
struct Request {
  bool gpu = true;
  bool enforce_f32 = false;
  int64_t repeats = 1;
  std::vector<Entry> entries;
};

// Printable, bounded form of an untrusted string for error messages (no control characters).
std::string Shown(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < 80; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (s.size() > 80) out += "...";
  return out + "\"";
}

bool CheckKeys(const Json& obj, std::initializer_list<const char*> allowed, const std::string& where,
               std::string* error) {
  for (const auto& f : obj.fields) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || f.first == a;
    if (!ok) {
      *error = where + ": unknown field " + Shown(f.first);
      return false;
    }
  }
  return true;
}

bool ParseRequest(const Json& root, Request* req, std::string* error) {
  if (root.type != Json::kObject) { *error = "the manifest is not a JSON object"; return false; }
  if (!CheckKeys(root, {"protocol", "version", "accelerator", "enforce_f32", "repeats", "entries"}, "manifest",
                 error))
    return false;
  const Json* protocol = root.Field("protocol");
  if (!protocol || protocol->type != Json::kString || protocol->text != kProtocol) {
    *error = std::string("manifest: \"protocol\" must be \"") + kProtocol + "\"";
    return false;
  }
  const Json* version = root.Field("version");
  if (!version || !version->is_integer || version->integer != kProtocolVersion) {
    *error = "manifest: \"version\" must be " + std::to_string(kProtocolVersion);
    return false;
  }
  const Json* accel = root.Field("accelerator");
  if (!accel || accel->type != Json::kString || (accel->text != "gpu" && accel->text != "cpu")) {
    *error = "manifest: \"accelerator\" must be \"gpu\" or \"cpu\"";
    return false;
  }
  req->gpu = accel->text == "gpu";
  const Json* f32 = root.Field("enforce_f32");
  if (f32) {
    if (f32->type != Json::kBool) { *error = "manifest: \"enforce_f32\" must be true or false"; return false; }
    req->enforce_f32 = f32->boolean;
  }
  const Json* repeats = root.Field("repeats");
  if (repeats) {
    if (!repeats->is_integer || repeats->integer < 1 || repeats->integer > kMaxRepeats) {
      *error = "manifest: \"repeats\" must be an integer from 1 to " + std::to_string(kMaxRepeats);
      return false;
    }
    req->repeats = repeats->integer;
  }
  const Json* entries = root.Field("entries");
  if (!entries || entries->type != Json::kArray || entries->items.empty() || entries->items.size() > kMaxEntries) {
    *error = "manifest: \"entries\" must be a list of 1 to " + std::to_string(kMaxEntries) + " entries";
    return false;
  }
  for (size_t e = 0; e < entries->items.size(); ++e) {
    const Json& je = entries->items[e];
    std::string where = "manifest entry " + std::to_string(e);
    if (je.type != Json::kObject) { *error = where + " is not an object"; return false; }
    if (!CheckKeys(je, {"signature", "inputs"}, where, error)) return false;
    Entry entry;
    const Json* sig = je.Field("signature");
    if (!sig || sig->type != Json::kString) { *error = where + ": \"signature\" must be a string"; return false; }
    entry.signature = sig->text;
    const Json* inputs = je.Field("inputs");
    if (!inputs || inputs->type != Json::kArray || inputs->items.size() > kMaxInputsPerEntry) {
      *error = where + ": \"inputs\" must be a list of at most " + std::to_string(kMaxInputsPerEntry);
      return false;
    }
    for (size_t i = 0; i < inputs->items.size(); ++i) {
      const Json& ji = inputs->items[i];
      std::string iwhere = where + " input " + std::to_string(i);
      if (ji.type != Json::kObject) { *error = iwhere + " is not an object"; return false; }
      if (!CheckKeys(ji, {"name", "dtype", "shape"}, iwhere, error)) return false;
      InputSpec spec;
      const Json* name = ji.Field("name");
      if (!name || name->type != Json::kString) { *error = iwhere + ": \"name\" must be a string"; return false; }
      spec.name = name->text;
      for (const auto& other : entry.inputs) {
        if (other.name == spec.name) { *error = iwhere + ": name " + Shown(spec.name) + " given twice"; return false; }
      }
      const Json* dtype = ji.Field("dtype");
      spec.dtype = dtype && dtype->type == Json::kString ? DTypeByName(dtype->text) : nullptr;
      if (!spec.dtype) { *error = iwhere + ": \"dtype\" must be one of the protocol's dtypes"; return false; }
      const Json* shape = ji.Field("shape");
      if (!shape || shape->type != Json::kArray || shape->items.size() > static_cast<size_t>(kMaxRank)) {
        *error = iwhere + ": \"shape\" must be a list of at most " + std::to_string(kMaxRank) + " sizes";
        return false;
      }
      for (const auto& d : shape->items) {
        if (!d.is_integer || d.integer < 0 || d.integer > INT32_MAX) {
          *error = iwhere + ": every size in \"shape\" must be an integer from 0 to 2^31-1";
          return false;
        }
        spec.shape.push_back(d.integer);
      }
      entry.inputs.push_back(std::move(spec));
    }
    req->entries.push_back(std::move(entry));
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Files: only the names the runner makes, never a symlink, sizes checked before any copy.
// ---------------------------------------------------------------------------------------------
// Into a vector, not a string: no terminating NUL after the bytes, so a read past the end of the manifest is a
// heap overflow that the sanitized build reports, not a silent read of a convenient zero.
bool ReadWholeFile(const std::string& path, size_t limit, std::vector<char>* data, std::string* error) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) { *error = "cannot open " + path + ": " + std::strerror(errno); return false; }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    *error = path + " is not a regular file";
    return false;
  }
  if (static_cast<uint64_t>(st.st_size) > limit) {
    close(fd);
    *error = path + " is larger than " + std::to_string(limit) + " bytes";
    return false;
  }
  data->resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < data->size()) {
    ssize_t n = read(fd, data->data() + got, data->size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got != data->size()) { *error = "short read of " + path; return false; }
  return true;
}

// Reads exactly `size` bytes of `path` into `dst`; the file must hold exactly that many.
bool ReadExactly(const std::string& path, void* dst, size_t size, std::string* error) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) { *error = "cannot open " + path + ": " + std::strerror(errno); return false; }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    *error = path + " is not a regular file";
    return false;
  }
  if (static_cast<uint64_t>(st.st_size) != size) {
    close(fd);
    *error = path + " holds " + std::to_string(static_cast<long long>(st.st_size)) + " bytes; the model's tensor needs " +
             std::to_string(size);
    return false;
  }
  char* out = static_cast<char*>(dst);
  size_t got = 0;
  while (got < size) {
    ssize_t n = read(fd, out + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got != size) { *error = "short read of " + path; return false; }
  return true;
}

bool WriteWholeFile(const std::string& path, const void* data, size_t size, std::string* error) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) { *error = "cannot write " + path + ": " + std::strerror(errno); return false; }
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, p + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  bool ok = done == size && close(fd) == 0;
  if (!ok) *error = "cannot write " + path + ": " + std::strerror(errno);
  return ok;
}

// ---------------------------------------------------------------------------------------------
// The result
// ---------------------------------------------------------------------------------------------
// A JSON string literal for any bytes: control characters and quotes escaped, bytes that are not
// valid UTF-8 replaced by U+FFFD so the host's JSON reader always accepts the file.
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  const unsigned char* u = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = u[i];
    if (c == '"' || c == '\\') { out.push_back('\\'); out.push_back(static_cast<char>(c)); ++i; continue; }
    if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      ++i;
      continue;
    }
    if (c < 0x80) { out.push_back(static_cast<char>(c)); ++i; continue; }
    size_t len = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
    bool valid = len > 0 && c < 0xF5 && i + len <= n;
    uint32_t cp = len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (size_t k = 1; valid && k < len; ++k) {
      valid = (u[i + k] & 0xC0) == 0x80;
      cp = (cp << 6) | (u[i + k] & 0x3Fu);
    }
    if (valid && ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
                  (cp >= 0xD800 && cp <= 0xDFFF)))
      valid = false;
    if (valid) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  return out + "\"";
}

std::string Ms(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", ms);
  return buf;
}

struct OutputRecord {
  std::string name;
  const DType* dtype;
  std::vector<int64_t> shape;
};
struct EntryRecord {
  std::string signature;
  std::vector<double> run_ms;
  std::vector<OutputRecord> outputs;
};
struct Result {
  std::string status = "bad_request";
  std::string error;
  std::string stage = "manifest";
  const char* accelerator = "gpu";
  bool enforce_f32 = false;
  double compile_ms = -1;
  int fully_accelerated = -1;  // -1 unknown, else 0/1
  int gpu_fully_accelerated = -1;
  std::string cache_key;       // set when the GPU program cache was used
  int cache_files_before = -1;  // files of that key in the cache folder before / after the compile
  int cache_files_after = -1;
  std::vector<EntryRecord> entries;
};

std::string ResultJson(const Result& r) {
  std::string s = "{\"protocol\": " + Quoted(kProtocol) + ", \"version\": " + std::to_string(kProtocolVersion);
  s += ", \"status\": " + Quoted(r.status) + ", \"error\": " + (r.error.empty() ? "null" : Quoted(r.error));
  s += ", \"stage\": " + Quoted(r.stage) + ", \"accelerator\": " + Quoted(r.accelerator);
  s += std::string(", \"enforce_f32\": ") + (r.enforce_f32 ? "true" : "false");
  s += ", \"compile_ms\": " + (r.compile_ms < 0 ? std::string("null") : Ms(r.compile_ms));
  auto tri = [](int v) { return v < 0 ? std::string("null") : v ? std::string("true") : std::string("false"); };
  s += ", \"fully_accelerated\": " + tri(r.fully_accelerated);
  s += ", \"gpu_fully_accelerated\": " + tri(r.gpu_fully_accelerated);
  if (!r.cache_key.empty())
    s += ", \"cache\": {\"key\": " + Quoted(r.cache_key) + ", \"files_before\": " +
         std::to_string(r.cache_files_before) + ", \"files_after\": " + std::to_string(r.cache_files_after) + "}";
  s += ", \"entries\": [";
  for (size_t e = 0; e < r.entries.size(); ++e) {
    const EntryRecord& er = r.entries[e];
    s += e ? ",\n  " : "\n  ";
    s += "{\"signature\": " + Quoted(er.signature) + ", \"run_ms\": [";
    for (size_t k = 0; k < er.run_ms.size(); ++k) s += (k ? ", " : "") + Ms(er.run_ms[k]);
    s += "], \"outputs\": [";
    for (size_t o = 0; o < er.outputs.size(); ++o) {
      const OutputRecord& orec = er.outputs[o];
      s += (o ? ", " : "") + std::string("{\"name\": ") + Quoted(orec.name) + ", \"dtype\": " +
           Quoted(orec.dtype->name) + ", \"shape\": [";
      for (size_t d = 0; d < orec.shape.size(); ++d) s += (d ? ", " : "") + std::to_string(orec.shape[d]);
      s += "]}";
    }
    s += "]}";
  }
  s += "]}\n";
  return s;
}

// Written to a temporary name and renamed, so the host never reads half a result.
bool WriteResult(const std::string& out_dir, const Result& r) {
  std::string body = ResultJson(r);
  std::string tmp = out_dir + "/result.json.tmp", error;
  if (!WriteWholeFile(tmp, body.data(), body.size(), &error) ||
      std::rename(tmp.c_str(), (out_dir + "/result.json").c_str()) != 0) {
    std::fprintf(stderr, "litert_gpu_runner: cannot write the result in %s: %s\n", out_dir.c_str(), error.c_str());
    return false;
  }
  return true;
}

int Finish(const std::string& out_dir, const Result& r, int code) {
  if (!r.error.empty()) std::fprintf(stderr, "litert_gpu_runner: %s: %s\n", r.status.c_str(), r.error.c_str());
  return WriteResult(out_dir, r) ? code : kExitInternal;
}

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string StatusText(const char* what, LiteRtStatus status) {
  return std::string(what) + " failed (LiteRT status " + std::to_string(status) + ")";
}

// ---------------------------------------------------------------------------------------------
// LiteRT objects, released in reverse order on every path out.
// ---------------------------------------------------------------------------------------------
struct Buffers {
  std::vector<LiteRtTensorBuffer> list;
  Buffers() = default;
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  ~Buffers() {
    for (LiteRtTensorBuffer b : list)
      if (b) LiteRtDestroyTensorBuffer(b);
  }
};

struct Runtime {
  LiteRtEnvironment env = nullptr;
  LiteRtModel model = nullptr;
  LiteRtOptions options = nullptr;
  LiteRtCompiledModel compiled = nullptr;
  ~Runtime() {
    if (compiled) LiteRtDestroyCompiledModel(compiled);
    if (options) LiteRtDestroyOptions(options);
    if (model) LiteRtDestroyModel(model);
    if (env) LiteRtDestroyEnvironment(env);
  }
};

// The folder libLiteRt.so was loaded from: where the GPU accelerator library sits beside it (the
// wheel's folder on a host, the runner's folder on a phone).
std::string RuntimeLibraryDir() {
  Dl_info info;
  std::memset(&info, 0, sizeof info);
  if (dladdr(reinterpret_cast<void*>(&LiteRtCreateEnvironment), &info) == 0 || !info.dli_fname) return "";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

void FreePayload(void* p) { std::free(p); }

struct TensorInfo {
  std::string name;
  const DType* dtype = nullptr;
  std::vector<int64_t> shape;
  size_t bytes = 0;
  RunnerLiteRtRankedTensorType type;
};

bool Describe(LiteRtTensor tensor, const char* name, TensorInfo* info, std::string* error) {
  info->name = name ? name : "";
  LiteRtStatus st = LiteRtGetRankedTensorType(tensor, &info->type);
  if (st != kRunnerLiteRtOk) { *error = "tensor " + Shown(info->name) + " has no ranked type"; return false; }
  info->dtype = DTypeByElement(info->type.element_type);
  if (!info->dtype) {
    *error = "tensor " + Shown(info->name) + " has element type " + std::to_string(info->type.element_type) +
             ", which the protocol does not carry";
    return false;
  }
  unsigned rank = info->type.layout.rank_bits & 0x7Fu;
  if (rank > static_cast<unsigned>(kMaxRank)) { *error = "tensor " + Shown(info->name) + " has rank > 8"; return false; }
  uint64_t count = 1;
  for (unsigned d = 0; d < rank; ++d) {
    int32_t dim = info->type.layout.dimensions[d];
    if (dim < 0) { *error = "tensor " + Shown(info->name) + " has a dynamic dimension; resize is not supported"; return false; }
    info->shape.push_back(dim);
    count *= static_cast<uint64_t>(dim);
    if (count > (uint64_t{1} << 40)) { *error = "tensor " + Shown(info->name) + " is too large"; return false; }
  }
  info->bytes = static_cast<size_t>(count * info->dtype->size);
  return true;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The GPU program cache's key: FNV-1a 64 over the model's bytes, plus the precision. The accelerator names its
// cache files by this key, so a changed model (or the other precision) can never read another model's programs.
bool ModelCacheKey(const std::string& model_path, bool enforce_f32, std::string* key, std::string* error) {
  int fd = open(model_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) { *error = "cannot read " + model_path + " for its cache key"; return false; }
  uint64_t h = 1469598103934665603ULL;
  char buf[1 << 16];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0)
    for (ssize_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(buf[i])) * 1099511628211ULL;
  close(fd);
  if (n < 0) { *error = "error reading " + model_path + " for its cache key"; return false; }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  *key = std::string("m") + hex + (enforce_f32 ? "_f32" : "_f16");
  return true;
}

// How many entries of `dir` start with `prefix` (the cache files written for one key).
int CountFilesWithPrefix(const std::string& dir, const std::string& prefix) {
  DIR* d = opendir(dir.c_str());
  if (!d) return 0;
  int count = 0;
  while (dirent* e = readdir(d))
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) ++count;
  closedir(d);
  return count;
}

struct Args {
  std::string manifest, out;
  std::string cache_dir;  // --cache-dir: the GPU program cache folder (a host-chosen path, never the manifest's)
};

bool ParseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) return false;
    if (flag == "--manifest") args->manifest = argv[++i];
    else if (flag == "--out") args->out = argv[++i];
    else if (flag == "--cache-dir") args->cache_dir = argv[++i];
    else return false;
  }
  return !args->manifest.empty() && !args->out.empty();
}

// The output folder: created here when missing; must be a real folder (not a symlink).
bool PrepareOutDir(const std::string& out, std::string* error) {
  if (mkdir(out.c_str(), 0755) != 0 && errno != EEXIST) {
    *error = "cannot create " + out + ": " + std::strerror(errno);
    return false;
  }
  struct stat st;
  if (lstat(out.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = out + " is not a folder";
    return false;
  }
  return true;
}

// The family a bucket request names ("seq_*" -> "seq_", "img_*" -> "img_", "audio_*" -> "audio_"), or "" when the
// entry names one signature.
std::string BucketFamily(const std::string& signature) {
  for (const char* family : kBucketFamilies)
    if (signature == std::string(family) + "*") return family;
  return "";
}

// Whether every input of `sig` holds the entry's input of the same name (same dtype and rank, no dimension
// smaller); `elements` gets the signature's input elements, so the smallest bucket that holds the entry wins.
bool Holds(LiteRtSignature sig, const Entry& entry, int64_t* elements) {
  size_t n_in = 0;
  if (LiteRtGetNumSignatureInputs(sig, &n_in) != kRunnerLiteRtOk || n_in != entry.inputs.size()) return false;
  *elements = 0;
  for (size_t j = 0; j < n_in; ++j) {
    const char* name = nullptr;
    LiteRtTensor tensor = nullptr;
    TensorInfo info;
    std::string ignored;
    if (LiteRtGetSignatureInputName(sig, j, &name) != kRunnerLiteRtOk || !name ||
        LiteRtGetSignatureInputTensorByIndex(sig, j, &tensor) != kRunnerLiteRtOk ||
        !Describe(tensor, name, &info, &ignored))
      return false;
    const InputSpec* spec = nullptr;
    for (const auto& given : entry.inputs)
      if (given.name == info.name) spec = &given;
    if (!spec || spec->dtype != info.dtype || spec->shape.size() != info.shape.size()) return false;
    int64_t count = 1;
    for (size_t d = 0; d < info.shape.size(); ++d) {
      if (spec->shape[d] > info.shape[d]) return false;
      count *= info.shape[d];
    }
    *elements += count;
  }
  return true;
}

// Copies `spec`'s raw file into the larger tensor `info` laid out in `host`: each innermost row of the file at
// the start of its row, every dimension padded at its end with zeros (text: token 0 and mask 0, never attended
// to; images and audio: zeros the model does see -- runtime/buckets.py).
bool ReadPadded(const std::string& file, const InputSpec& spec, const TensorInfo& info, void* host,
                std::string* error) {
  size_t elem = info.dtype->size, rank = spec.shape.size(), count = 1;
  for (int64_t d : spec.shape) count *= static_cast<size_t>(d);
  std::vector<char> given(count * elem);
  if (!ReadExactly(file, given.data(), given.size(), error)) return false;
  char* out = static_cast<char*>(host);
  std::memset(out, 0, info.bytes);
  if (count == 0) return true;
  if (rank == 0) {
    std::memcpy(out, given.data(), elem);
    return true;
  }
  size_t row = static_cast<size_t>(spec.shape[rank - 1]) * elem, rows = count / spec.shape[rank - 1];
  std::vector<int64_t> index(rank - 1, 0);
  for (size_t r = 0; r < rows; ++r) {
    size_t dst = 0;
    for (size_t d = 0; d + 1 < rank; ++d) dst = dst * info.shape[d] + index[d];
    dst *= static_cast<size_t>(info.shape[rank - 1]);
    std::memcpy(out + dst * elem, given.data() + r * row, row);
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < spec.shape[d]) break;
      index[d] = 0;
    }
  }
  return true;
}

// One entry of the job: find its signature, bind its inputs by name, run it `repeats` times, write its outputs.
// Returns -1 when the entry ran (its record is in `result`), else the exit status after the result is written.
int RunEntry(const Args& args, const std::string& job, const Request& req, size_t e, const Runtime& rt,
             size_t num_signatures, Result* result) {
  LiteRtStatus st = kRunnerLiteRtOk;
  std::string error;
  const Entry& entry = req.entries[e];
  result->stage = "run:" + entry.signature;
  std::string where = "entry " + std::to_string(e) + " (signature " + Shown(entry.signature) + ")";
  size_t sig_index = num_signatures;
  LiteRtSignature sig = nullptr;
  std::string chosen = entry.signature;
  const std::string family = BucketFamily(entry.signature);
  const bool bucket = !family.empty();
  int64_t best = 0;
  size_t in_family = 0;
  for (size_t s = 0; s < num_signatures; ++s) {
    LiteRtSignature candidate = nullptr;
    const char* key = nullptr;
    if (LiteRtGetModelSignature(rt.model, s, &candidate) != kRunnerLiteRtOk ||
        LiteRtGetSignatureKey(candidate, &key) != kRunnerLiteRtOk || !key)
      continue;
    if (!bucket) {
      if (entry.signature == key) {
        sig_index = s;
        sig = candidate;
        break;
      }
      continue;
    }
    if (std::strncmp(key, family.c_str(), family.size()) != 0) continue;
    ++in_family;
    int64_t elements = 0;
    if (Holds(candidate, entry, &elements) && (!sig || elements < best)) {
      sig_index = s;
      sig = candidate;
      best = elements;
      chosen = key;
    }
  }
  if (!sig) {
    std::string shapes;
    for (const auto& spec : entry.inputs) shapes += (shapes.empty() ? "" : ", ") + Shown(spec.name) + " " +
                                                    ShapeText(spec.shape);
    result->error = where + (!bucket ? ": the model has no such signature"
                             : in_family == 0 ? ": the model has no " + family + "<N> bucket signatures"
                                              : ": no " + family + "<N> bucket holds the entry's inputs (" + shapes +
                                                    ")");
    return Finish(args.out, *result, kExitBadRequest);
  }
  result->stage = "run:" + chosen;
  size_t n_in = 0, n_out = 0;
  if (LiteRtGetNumSignatureInputs(sig, &n_in) != kRunnerLiteRtOk ||
      LiteRtGetNumSignatureOutputs(sig, &n_out) != kRunnerLiteRtOk) {
    result->status = "run_failed";
    result->error = where + ": cannot read the signature's inputs and outputs";
    return Finish(args.out, *result, kExitModelFailed);
  }
  if (entry.inputs.size() != n_in) {
    result->error = where + ": the manifest gives " + std::to_string(entry.inputs.size()) +
                   " inputs; the signature takes " + std::to_string(n_in);
    return Finish(args.out, *result, kExitBadRequest);
  }
  Buffers ins, outs;
  ins.list.assign(n_in, nullptr);
  outs.list.assign(n_out, nullptr);
  for (size_t j = 0; j < n_in; ++j) {
    const char* name = nullptr;
    LiteRtTensor tensor = nullptr;
    TensorInfo info;
    if (LiteRtGetSignatureInputName(sig, j, &name) != kRunnerLiteRtOk || !name ||
        LiteRtGetSignatureInputTensorByIndex(sig, j, &tensor) != kRunnerLiteRtOk ||
        !Describe(tensor, name, &info, &error)) {
      result->error = where + ": input " + std::to_string(j) + ": " + (error.empty() ? "unreadable" : error);
      return Finish(args.out, *result, kExitBadRequest);
    }
    size_t given = entry.inputs.size();
    for (size_t i = 0; i < entry.inputs.size(); ++i)
      if (entry.inputs[i].name == info.name) given = i;
    if (given == entry.inputs.size()) {
      result->error = where + ": no data for the model's input " + Shown(info.name);
      return Finish(args.out, *result, kExitBadRequest);
    }
    const InputSpec& spec = entry.inputs[given];
    const bool pad = bucket;   // Holds() checked that the bucket's input holds the entry's: padded into it
    if (spec.dtype != info.dtype || (spec.shape != info.shape && !pad)) {
      result->error = where + ": input " + Shown(info.name) + " is " + spec.dtype->name + " " +
                     ShapeText(spec.shape) + " in the manifest; the model takes " + info.dtype->name + " " +
                     ShapeText(info.shape);
      return Finish(args.out, *result, kExitBadRequest);
    }
    LiteRtTensorBufferRequirements reqs = nullptr;
    st = LiteRtGetCompiledModelInputBufferRequirements(rt.compiled, sig_index, j, &reqs);
    if (st == kRunnerLiteRtOk)
      st = LiteRtCreateManagedTensorBufferFromRequirements(rt.env, &info.type, reqs, &ins.list[j]);
    size_t packed = 0;
    if (st == kRunnerLiteRtOk) st = LiteRtGetTensorBufferPackedSize(ins.list[j], &packed);
    if (st != kRunnerLiteRtOk || packed != info.bytes) {
      result->status = "run_failed";
      result->error = where + ": " + (st != kRunnerLiteRtOk ? StatusText("creating an input buffer", st)
                                                            : "the input buffer's size is not the tensor's");
      return Finish(args.out, *result, kExitModelFailed);
    }
    // The file is named from the indices, never from the manifest or the model.
    std::string file = job + "/in_" + std::to_string(e) + "_" + std::to_string(given) + ".raw";
    void* host = nullptr;
    st = LiteRtLockTensorBuffer(ins.list[j], &host, kRunnerLockWrite);
    if (st != kRunnerLiteRtOk || !host) {
      result->status = "run_failed";
      result->error = where + ": " + StatusText("locking an input buffer", st);
      return Finish(args.out, *result, kExitModelFailed);
    }
    bool read_ok = pad ? ReadPadded(file, spec, info, host, &error) : ReadExactly(file, host, info.bytes, &error);
    LiteRtUnlockTensorBuffer(ins.list[j]);
    if (!read_ok) {
      result->error = where + ": input " + Shown(info.name) + ": " + error;
      return Finish(args.out, *result, kExitBadRequest);
    }
  }
  EntryRecord record;
  record.signature = chosen;            // a bucket entry's record names the bucket it ran
  std::vector<TensorInfo> out_info(n_out);
  for (size_t o = 0; o < n_out; ++o) {
    const char* name = nullptr;
    LiteRtTensor tensor = nullptr;
    if (LiteRtGetSignatureOutputName(sig, o, &name) != kRunnerLiteRtOk || !name ||
        LiteRtGetSignatureOutputTensorByIndex(sig, o, &tensor) != kRunnerLiteRtOk ||
        !Describe(tensor, name, &out_info[o], &error)) {
      result->status = "run_failed";
      result->error = where + ": output " + std::to_string(o) + ": " + (error.empty() ? "unreadable" : error);
      return Finish(args.out, *result, kExitModelFailed);
    }
    LiteRtTensorBufferRequirements reqs = nullptr;
    st = LiteRtGetCompiledModelOutputBufferRequirements(rt.compiled, sig_index, o, &reqs);
    if (st == kRunnerLiteRtOk)
      st = LiteRtCreateManagedTensorBufferFromRequirements(rt.env, &out_info[o].type, reqs, &outs.list[o]);
    size_t packed = 0;
    if (st == kRunnerLiteRtOk) st = LiteRtGetTensorBufferPackedSize(outs.list[o], &packed);
    if (st != kRunnerLiteRtOk || packed != out_info[o].bytes) {
      result->status = "run_failed";
      result->error = where + ": " + (st != kRunnerLiteRtOk ? StatusText("creating an output buffer", st)
                                                            : "the output buffer's size is not the tensor's");
      return Finish(args.out, *result, kExitModelFailed);
    }
  }
  std::vector<std::vector<char>> data(n_out);
  for (size_t o = 0; o < n_out; ++o) data[o].resize(out_info[o].bytes);
  for (int64_t r = 0; r < req.repeats; ++r) {
    auto t1 = std::chrono::steady_clock::now();
    std::string failed;
    for (int attempt = 0;; ++attempt) {
      t1 = std::chrono::steady_clock::now();
      failed = "running the compiled model";
      st = LiteRtRunCompiledModel(rt.compiled, sig_index, n_in, ins.list.data(), n_out, outs.list.data());
      // Reading every output back synchronises the GPU, so the time covers the whole run.
      for (size_t o = 0; st == kRunnerLiteRtOk && o < n_out; ++o) {
        void* host = nullptr;
        failed = "reading output " + std::to_string(o) + " back";
        st = LiteRtLockTensorBuffer(outs.list[o], &host, kRunnerLockRead);
        if (st != kRunnerLiteRtOk) break;
        if (host) std::memcpy(data[o].data(), host, data[o].size());
        LiteRtUnlockTensorBuffer(outs.list[o]);
        if (!host && !data[o].empty()) st = -1;  // locked, but no memory to read from
      }
      // Seen once on a software GPU sharing two busy cores: the runtime gave up waiting (status 7) where the
      // same run succeeded a moment later. A wait that ran out is retried, and said so; any other error is final.
      if (st != kRunnerLiteRtTimeoutExpired || attempt >= 2) break;
      std::fprintf(stderr, "litert_gpu_runner: %s: the runtime's wait ran out (status 7) while %s; retrying\n",
                   where.c_str(), failed.c_str());
    }
    if (st != kRunnerLiteRtOk) {
      result->status = "run_failed";
      result->error = where + ": " + StatusText(failed.c_str(), st);
      return Finish(args.out, *result, kExitModelFailed);
    }
    record.run_ms.push_back(MsSince(t1));
  }
  for (size_t o = 0; o < n_out; ++o) {
    std::string file = args.out + "/out_" + std::to_string(e) + "_" + std::to_string(o) + ".raw";
    if (!WriteWholeFile(file, data[o].data(), data[o].size(), &error)) {
      std::fprintf(stderr, "litert_gpu_runner: %s\n", error.c_str());
      return kExitInternal;
    }
    record.outputs.push_back({out_info[o].name, out_info[o].dtype, out_info[o].shape});
  }
  result->entries.push_back(std::move(record));
  return -1;
}

int Run(const Args& args) {
  Result result;
  std::string error;
  if (!PrepareOutDir(args.out, &error)) {
    std::fprintf(stderr, "litert_gpu_runner: %s\n", error.c_str());
    return kExitInternal;
  }
  size_t slash = args.manifest.rfind('/');
  const std::string job = slash == std::string::npos ? "." : args.manifest.substr(0, slash);

  // 1. the request
  std::vector<char> text;
  if (!ReadWholeFile(args.manifest, kMaxManifestBytes, &text, &error)) {
    result.error = error;
    return Finish(args.out, result, kExitBadRequest);
  }
  Json root;
  JsonReader reader(text.data(), text.size());
  if (!reader.Parse(&root, &error)) {
    result.error = "manifest is not valid JSON: " + error;
    return Finish(args.out, result, kExitBadRequest);
  }
  Request req;
  if (!ParseRequest(root, &req, &error)) {
    result.error = error;
    return Finish(args.out, result, kExitBadRequest);
  }
  result.accelerator = req.gpu ? "gpu" : "cpu";
  result.enforce_f32 = req.enforce_f32;

  // 2. environment, model, options, compile
  result.stage = "compile";
  Runtime rt;
  std::string lib_dir = RuntimeLibraryDir();
  RunnerLiteRtEnvOption env_option;
  std::memset(&env_option, 0, sizeof env_option);
  env_option.tag = kRunnerEnvTagRuntimeLibraryDir;
  env_option.value.type = kRunnerAnyTypeString;
  env_option.value.u.str_value = lib_dir.c_str();
  LiteRtStatus st = LiteRtCreateEnvironment(lib_dir.empty() ? 0 : 1, lib_dir.empty() ? nullptr : &env_option, &rt.env);
  if (st != kRunnerLiteRtOk && !lib_dir.empty()) {
    // A runtime that does not know the option: let it look for its accelerators on its own.
    std::fprintf(stderr, "litert_gpu_runner: environment with the library folder option failed (status %d); "
                 "retrying without options\n", st);
    rt.env = nullptr;
    st = LiteRtCreateEnvironment(0, nullptr, &rt.env);
  }
  if (st != kRunnerLiteRtOk) {
    result.status = "compile_failed";
    result.error = StatusText("creating the LiteRT environment", st);
    return Finish(args.out, result, kExitModelFailed);
  }
  std::string model_path = job + "/model.tflite";
  struct stat model_st;
  if (lstat(model_path.c_str(), &model_st) != 0 || !S_ISREG(model_st.st_mode)) {
    result.error = model_path + " is missing or not a regular file";
    return Finish(args.out, result, kExitBadRequest);
  }
  st = LiteRtCreateModelFromFile(rt.env, model_path.c_str(), &rt.model);
  if (st != kRunnerLiteRtOk) {
    result.error = StatusText("loading model.tflite", st) + ": not a valid .tflite?";
    return Finish(args.out, result, kExitBadRequest);
  }
  st = LiteRtCreateOptions(&rt.options);
  if (st == kRunnerLiteRtOk) st = LiteRtSetOptionsHardwareAccelerators(rt.options, req.gpu ? kRunnerHwGpu : kRunnerHwCpu);
  // GPU options travel as an opaque TOML payload that the GPU accelerator parses: precision 2 is fp32; the
  // serialization folder and key turn on the program cache (compiled GPU programs written on the first compile,
  // read on the next).
  std::string toml;
  if (req.gpu && req.enforce_f32) toml += "precision = 2\n";
  if (req.gpu && !args.cache_dir.empty()) {
    struct stat cache_st;
    if (stat(args.cache_dir.c_str(), &cache_st) != 0 || !S_ISDIR(cache_st.st_mode) ||
        args.cache_dir.find_first_of("\"\\\n\r") != std::string::npos) {
      result.error = "--cache-dir " + Shown(args.cache_dir) + " is not an existing folder with a plain name";
      return Finish(args.out, result, kExitBadRequest);
    }
    if (!ModelCacheKey(model_path, req.enforce_f32, &result.cache_key, &error)) {
      result.error = error;
      return Finish(args.out, result, kExitBadRequest);
    }
    result.cache_files_before = CountFilesWithPrefix(args.cache_dir, result.cache_key);
    toml += "serialization_dir = \"" + args.cache_dir + "\"\n";
    toml += "model_cache_key = \"" + result.cache_key + "\"\n";
    toml += "serialize_program_cache = true\n";
  }
  if (st == kRunnerLiteRtOk && !toml.empty()) {
    char* payload = static_cast<char*>(std::malloc(toml.size() + 1));
    LiteRtOpaqueOptions opaque = nullptr;
    if (!payload) {
      st = -1;
    } else {
      std::memcpy(payload, toml.c_str(), toml.size() + 1);
      st = LiteRtCreateOpaqueOptions("gpu_options", payload, FreePayload, &opaque);
      if (st != kRunnerLiteRtOk) std::free(payload);
    }
    if (st == kRunnerLiteRtOk) {
      st = LiteRtAddOpaqueOptions(rt.options, opaque);
      if (st != kRunnerLiteRtOk) LiteRtDestroyOpaqueOptions(opaque);
    }
  }
  if (st != kRunnerLiteRtOk) {
    result.status = "compile_failed";
    result.error = StatusText("setting the compilation options", st);
    return Finish(args.out, result, kExitModelFailed);
  }
  std::fflush(stderr);
  auto t0 = std::chrono::steady_clock::now();
  st = LiteRtCreateCompiledModel(rt.env, rt.model, rt.options, &rt.compiled);
  result.compile_ms = MsSince(t0);
  if (!result.cache_key.empty()) {
    result.cache_files_after = CountFilesWithPrefix(args.cache_dir, result.cache_key);
    std::fprintf(stderr, "litert_gpu_runner: GPU program cache %s: %d file(s) before the compile, %d after\n",
                 result.cache_key.c_str(), result.cache_files_before, result.cache_files_after);
  }
  if (st != kRunnerLiteRtOk) {
    result.status = "compile_failed";
    result.error = StatusText(req.gpu ? "a strict GPU-only compile" : "a CPU compile", st) +
                   (req.gpu ? "; the runtime's log says why (ops the GPU rejected, or no GPU)" : "");
    return Finish(args.out, result, kExitModelFailed);
  }
  // The runtime's own residency facts. After a GPU-only compile nothing may be left for the CPU.
  bool fully = false, gpu_fully = false;
  if (LiteRtCompiledModelIsFullyAccelerated(rt.compiled, &fully) == kRunnerLiteRtOk)
    result.fully_accelerated = fully ? 1 : 0;
  if (LiteRtCompiledModelIsNonCpuFullyAccelerated != nullptr &&
      LiteRtCompiledModelIsNonCpuFullyAccelerated(rt.compiled, &gpu_fully) == kRunnerLiteRtOk)
    result.gpu_fully_accelerated = gpu_fully ? 1 : 0;
  std::fprintf(stderr, "litert_gpu_runner: compiled for %s%s in %.1f ms; fully accelerated: %s; "
               "fully on a non-CPU accelerator: %s\n", result.accelerator,
               req.gpu ? (req.enforce_f32 ? " (fp32)" : " (default precision)") : "", result.compile_ms,
               result.fully_accelerated < 0 ? "unknown" : fully ? "yes" : "no",
               result.gpu_fully_accelerated < 0 ? "unknown" : gpu_fully ? "yes" : "no");
  if (req.gpu && result.gpu_fully_accelerated == 0) {
    result.status = "compile_failed";
    result.error = "the GPU-only compile left part of the model off the GPU (not fully accelerated)";
    return Finish(args.out, result, kExitModelFailed);
  }

  // 3. every entry: bind inputs by name, run `repeats` times, keep the last outputs
  size_t num_signatures = 0;
  if (LiteRtGetNumModelSignatures(rt.model, &num_signatures) != kRunnerLiteRtOk) num_signatures = 0;
  for (size_t e = 0; e < req.entries.size(); ++e) {
    int code = RunEntry(args, job, req, e, rt, num_signatures, &result);
    if (code >= 0) return code;
  }
  result.status = "ok";
  result.stage = "done";
  return Finish(args.out, result, kExitOk);
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    std::fprintf(stderr, "usage: litert_gpu_runner --manifest JOB/manifest.json --out JOB/out [--cache-dir DIR]\n");
    return kExitBadRequest;
  }
  // Out of memory or any other C++ exception ends as a clean internal error, never an abort.
  try {
    return Run(args);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "litert_gpu_runner: out of memory\n");
  } catch (const std::exception& exc) {
    std::fprintf(stderr, "litert_gpu_runner: internal error: %s\n", exc.what());
  }
  return kExitInternal;
}
