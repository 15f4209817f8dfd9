// Which library asked the driver for a block of device memory outside the allocator, from
// the file names of its stack's frames: shared by the report (over a trace's frames) and
// the CUPTI tracer (over the frames it just captured).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

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

// The library of one frame: kUnknown for a Python or API frame (not native: a shared
// object's path with line 0, docs/trace-format.md) and for the CUDA plumbing. A stack's
// library is its first frame, innermost first, that is not kUnknown.
OutsideLibrary LibraryOfFrame(absl::string_view filename, std::int32_t line);

}  // namespace gpumem::report
