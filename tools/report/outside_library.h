// Which library asked the driver for a block of device memory outside the allocator: the
// first native frame of its stack, innermost first, past the CUDA runtime, the driver and
// the CUPTI tracer. Allocations recorded by the CUPTI tracer carry an API frame
// innermost ("[cuda-driver]" / "[cuda-runtime]"); that is what marks them as outside.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

enum class OutsideLibrary : std::uint8_t {
  kNccl,
  kCublas,  // cuBLAS and cuBLASLt
  kCudnn,
  kOther,      // a native library not named above (PyTorch's own cudaMalloc calls, ...)
  kUnknown,    // no native frames recorded (GPUMEM_STACKS none or python)
  kAllocator,  // the allocator's own memory (gpumem, PyTorch's caching allocator): not outside
};
inline constexpr std::size_t kOutsideLibraries = 5;  // kNccl..kUnknown

// "NCCL", "cuBLAS", "cuDNN", "other", "unknown", "allocator".
const char* OutsideLibraryName(OutsideLibrary library);
// "nccl", "cublas", "cudnn", "other", "unknown": JSON keys.
const char* OutsideLibraryKey(OutsideLibrary library);

// The library a shared object path belongs to; kOther for one not named, kUnknown for
// the runtime, driver and tracer themselves (look further out).
OutsideLibrary LibraryOfFile(absl::string_view path);

// True when the stack's innermost frame is a CUDA API frame: recorded by the CUPTI tracer.
bool IsDriverCall(const trace::Trace& trace, std::uint32_t stack);

// The library of a recorded driver call's stack (kUnknown without native frames).
OutsideLibrary LibraryOfStack(const trace::Trace& trace, std::uint32_t stack);

}  // namespace gpumem::report
