#include "profiler/driver_memory.h"

#include <cstddef>
#include <mutex>

#include "profiler/driver_symbol.h"

namespace gpumem {
namespace {

using CuResult = int;  // CUresult; 0 = CUDA_SUCCESS
using CtxGetCurrent = CuResult (*)(void**);
using CtxGetDevice = CuResult (*)(int*);
using MemGetInfo = CuResult (*)(std::size_t*, std::size_t*);

struct DriverCalls {
  CtxGetCurrent get_current = nullptr;
  CtxGetDevice get_device = nullptr;
  MemGetInfo get_info = nullptr;
};

DriverCalls LookUp() {
  DriverCalls c;
  c.get_current = reinterpret_cast<CtxGetCurrent>(DriverSymbol("cuCtxGetCurrent"));
  c.get_device = reinterpret_cast<CtxGetDevice>(DriverSymbol("cuCtxGetDevice"));
  c.get_info = reinterpret_cast<MemGetInfo>(DriverSymbol("cuMemGetInfo_v2"));
  return c;
}

}  // namespace

std::optional<DriverMemory> SampleDriverMemory() {
  // Looked up until found: the driver may load after the first step.
  static std::mutex mu;
  static DriverCalls found;
  DriverCalls calls;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (found.get_info == nullptr) found = LookUp();
    calls = found;
  }
  if (calls.get_current == nullptr || calls.get_device == nullptr || calls.get_info == nullptr) {
    return std::nullopt;
  }
  void* context = nullptr;
  if (calls.get_current(&context) != 0 || context == nullptr) return std::nullopt;
  int device = 0;
  std::size_t free = 0, total = 0;
  if (calls.get_device(&device) != 0 || calls.get_info(&free, &total) != 0) return std::nullopt;
  return DriverMemory{device, free, total};
}

}  // namespace gpumem
