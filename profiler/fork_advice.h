// What gpumem says when CUDA is used in a child forked from a process that had CUDA (the
// DataLoader num_workers > 0 failure): one text for stderr and one for the trace, shared
// by the CUPTI tracer (which sees the driver call) and the C ABI (which PyTorch's
// refusal reaches through the Python package, before any driver call).
#pragma once

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpumem {

inline std::string ForkedChildCudaMessage(absl::string_view call, long pid) {
  return absl::StrCat(
      "gpumem: CUDA was called (", call, ") in process ", pid,
      ", a child forked from a process that had already initialized CUDA. CUDA does not "
      "survive fork(): this is what happens when PyTorch DataLoader workers (num_workers > "
      "0, fork start method) touch CUDA. Fix: do not use CUDA in DataLoader workers (return "
      "CPU tensors and move them to the GPU in the main process), or use the 'spawn' start "
      "method: DataLoader(..., multiprocessing_context='spawn') or "
      "torch.multiprocessing.set_start_method('spawn').\n");
}

inline std::string ForkedChildCudaAnnotation(absl::string_view call) {
  return absl::StrCat("cuda-in-forked-child: ", call,
                      "; DataLoader workers must not touch CUDA; use the 'spawn' start method");
}

}  // namespace gpumem
