#include <cstdint>

#include "absl/strings/str_cat.h"
#include "tools/trace/trace.h"

namespace gpumem::trace {
namespace {

struct ErrorName {
  std::uint32_t code;
  const char* driver;   // CUresult
  const char* runtime;  // cudaError_t
};

// The codes a failed allocation returns in practice; the two enums share these values.
constexpr ErrorName kErrorNames[] = {
    {1, "CUDA_ERROR_INVALID_VALUE", "cudaErrorInvalidValue"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "cudaErrorInitializationError"},
    {4, "CUDA_ERROR_DEINITIALIZED", "cudaErrorCudartUnloading"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "cudaErrorInvalidDevice"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "cudaErrorDeviceUninitialized"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "cudaErrorIllegalAddress"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "cudaErrorNotSupported"},
    {999, "CUDA_ERROR_UNKNOWN", "cudaErrorUnknown"},
};

}  // namespace

std::string FailedCallErrorName(const FailedAllocation& f) {
  for (const ErrorName& e : kErrorNames) {
    if (e.code == f.error) return f.runtime ? e.runtime : e.driver;
  }
  return absl::StrCat("error ", f.error);
}

}  // namespace gpumem::trace
