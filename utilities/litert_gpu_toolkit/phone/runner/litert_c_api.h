// The part of LiteRT's C API (libLiteRt.so) that litert_gpu_runner calls, declared here by hand.
//
// Why by hand: the runner must build on a machine that has only the pip wheel's (or the Android
// release's) libLiteRt.so and no LiteRT source tree. Function names, argument lists, enum values
// and struct layouts below are those of the published ABI of LiteRT 2.3 (google-ai-edge/LiteRT,
// litert/c/); they were checked against the wheel's libLiteRt.so (ai-edge-litert 2.3.0):
// LiteRtCreateModelFromFile takes the environment first, and a ranked tensor type is 72 bytes.
// Only what the runner uses is declared; every handle is an opaque pointer.
#ifndef LITERT_GPU_RUNNER_LITERT_C_API_H_
#define LITERT_GPU_RUNNER_LITERT_C_API_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int LiteRtStatus;  // 0 = ok; any other value is an error code
enum { kRunnerLiteRtOk = 0, kRunnerLiteRtTimeoutExpired = 7 };

typedef struct LiteRtEnvironmentT* LiteRtEnvironment;
typedef struct LiteRtModelT* LiteRtModel;
typedef struct LiteRtSignatureT* LiteRtSignature;
typedef struct LiteRtTensorT* LiteRtTensor;
typedef struct LiteRtOptionsT* LiteRtOptions;
typedef struct LiteRtOpaqueOptionsT* LiteRtOpaqueOptions;
typedef struct LiteRtCompiledModelT* LiteRtCompiledModel;
typedef struct LiteRtTensorBufferT* LiteRtTensorBuffer;
typedef struct LiteRtTensorBufferRequirementsT* LiteRtTensorBufferRequirements;

// Hardware accelerator bits for LiteRtSetOptionsHardwareAccelerators.
enum { kRunnerHwCpu = 1, kRunnerHwGpu = 2 };

// Environment options: a tag plus a tagged union (LiteRtAny).
enum { kRunnerEnvTagRuntimeLibraryDir = 22 };
enum { kRunnerAnyTypeString = 8 };
typedef struct {
  int type;
  union {
    bool bool_value;
    int64_t int_value;
    double real_value;
    const char* str_value;
    const void* ptr_value;
  } u;
} RunnerLiteRtAny;
typedef struct {
  int tag;
  RunnerLiteRtAny value;
} RunnerLiteRtEnvOption;

// Element types (the TFLite type codes).
enum {
  kRunnerElFloat32 = 1,
  kRunnerElInt32 = 2,
  kRunnerElUInt8 = 3,
  kRunnerElInt64 = 4,
  kRunnerElBool = 6,
  kRunnerElInt16 = 7,
  kRunnerElInt8 = 9,
  kRunnerElFloat16 = 10,
};

// A ranked tensor type: element type, then the layout (rank in the low 7 bits of the first word,
// a has-strides bit above it, 8 dimensions, 8 strides). 72 bytes, 4-byte aligned.
typedef struct {
  uint32_t rank_bits;
  int32_t dimensions[8];
  uint32_t strides[8];
} RunnerLiteRtLayout;
typedef struct {
  int32_t element_type;
  RunnerLiteRtLayout layout;
} RunnerLiteRtRankedTensorType;

enum { kRunnerLockRead = 0, kRunnerLockWrite = 1 };

LiteRtStatus LiteRtCreateEnvironment(int num_options, const RunnerLiteRtEnvOption* options,
                                     LiteRtEnvironment* environment);
void LiteRtDestroyEnvironment(LiteRtEnvironment environment);

LiteRtStatus LiteRtCreateModelFromFile(LiteRtEnvironment environment, const char* filename, LiteRtModel* model);
void LiteRtDestroyModel(LiteRtModel model);
LiteRtStatus LiteRtGetNumModelSignatures(LiteRtModel model, size_t* num_signatures);
LiteRtStatus LiteRtGetModelSignature(LiteRtModel model, size_t signature_index, LiteRtSignature* signature);
LiteRtStatus LiteRtGetSignatureKey(LiteRtSignature signature, const char** key);
LiteRtStatus LiteRtGetNumSignatureInputs(LiteRtSignature signature, size_t* num_inputs);
LiteRtStatus LiteRtGetSignatureInputName(LiteRtSignature signature, size_t index, const char** name);
LiteRtStatus LiteRtGetSignatureInputTensorByIndex(LiteRtSignature signature, size_t index, LiteRtTensor* tensor);
LiteRtStatus LiteRtGetNumSignatureOutputs(LiteRtSignature signature, size_t* num_outputs);
LiteRtStatus LiteRtGetSignatureOutputName(LiteRtSignature signature, size_t index, const char** name);
LiteRtStatus LiteRtGetSignatureOutputTensorByIndex(LiteRtSignature signature, size_t index, LiteRtTensor* tensor);
LiteRtStatus LiteRtGetRankedTensorType(LiteRtTensor tensor, RunnerLiteRtRankedTensorType* type);

LiteRtStatus LiteRtCreateOptions(LiteRtOptions* options);
void LiteRtDestroyOptions(LiteRtOptions options);
LiteRtStatus LiteRtSetOptionsHardwareAccelerators(LiteRtOptions options, int accelerators);
LiteRtStatus LiteRtCreateOpaqueOptions(const char* identifier, void* payload, void (*destroy_payload)(void*),
                                       LiteRtOpaqueOptions* options);
void LiteRtDestroyOpaqueOptions(LiteRtOpaqueOptions options);
// `options` takes ownership of `opaque` when this returns ok.
LiteRtStatus LiteRtAddOpaqueOptions(LiteRtOptions options, LiteRtOpaqueOptions opaque);

LiteRtStatus LiteRtCreateCompiledModel(LiteRtEnvironment environment, LiteRtModel model, LiteRtOptions options,
                                       LiteRtCompiledModel* compiled_model);
void LiteRtDestroyCompiledModel(LiteRtCompiledModel compiled_model);
LiteRtStatus LiteRtCompiledModelIsFullyAccelerated(LiteRtCompiledModel compiled_model, bool* fully_accelerated);
// Weak: LiteRT before 2.3 has no such call, and the runner still links and runs there (the fact is then unknown).
__attribute__((weak)) LiteRtStatus LiteRtCompiledModelIsNonCpuFullyAccelerated(LiteRtCompiledModel compiled_model,
                                                                              bool* fully_accelerated);
// The requirements stay owned by the compiled model.
LiteRtStatus LiteRtGetCompiledModelInputBufferRequirements(LiteRtCompiledModel compiled_model,
                                                           size_t signature_index, size_t input_index,
                                                           LiteRtTensorBufferRequirements* requirements);
LiteRtStatus LiteRtGetCompiledModelOutputBufferRequirements(LiteRtCompiledModel compiled_model,
                                                            size_t signature_index, size_t output_index,
                                                            LiteRtTensorBufferRequirements* requirements);
LiteRtStatus LiteRtRunCompiledModel(LiteRtCompiledModel compiled_model, size_t signature_index,
                                    size_t num_inputs, LiteRtTensorBuffer* inputs,
                                    size_t num_outputs, LiteRtTensorBuffer* outputs);

LiteRtStatus LiteRtCreateManagedTensorBufferFromRequirements(LiteRtEnvironment environment,
                                                             const RunnerLiteRtRankedTensorType* type,
                                                             LiteRtTensorBufferRequirements requirements,
                                                             LiteRtTensorBuffer* buffer);
void LiteRtDestroyTensorBuffer(LiteRtTensorBuffer buffer);
LiteRtStatus LiteRtGetTensorBufferPackedSize(LiteRtTensorBuffer buffer, size_t* size);
LiteRtStatus LiteRtLockTensorBuffer(LiteRtTensorBuffer buffer, void** host_address, int lock_mode);
LiteRtStatus LiteRtUnlockTensorBuffer(LiteRtTensorBuffer buffer);

#ifdef __cplusplus
}
#endif

#endif  // LITERT_GPU_RUNNER_LITERT_C_API_H_
