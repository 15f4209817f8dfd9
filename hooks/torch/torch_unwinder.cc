#include "hooks/torch/torch_unwinder.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "hooks/gpumem.h"

#if __has_include(<torch/csrc/profiler/unwind/unwind.h>)
#include <torch/csrc/profiler/unwind/unwind.h>
#else
#include <c10/macros/Export.h>
namespace torch::unwind {
TORCH_API std::vector<void*> unwind();  // libtorch; its header is not always installed
}  // namespace torch::unwind
#endif

namespace gpumem::torch {
namespace {

std::size_t Unwind(void** pcs, std::size_t max) {
  try {
    const std::vector<void*> frames = ::torch::unwind::unwind();
    const std::size_t n = std::min(max, frames.size());
    std::copy_n(frames.begin(), n, pcs);
    return n;
  } catch (...) {
    return 0;  // the recorder falls back to backtrace()
  }
}

}  // namespace

void UsePytorchUnwinder() { gpumem_set_native_unwinder(&Unwind); }

}  // namespace gpumem::torch
