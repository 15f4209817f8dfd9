// Native stacks through PyTorch's own unwinder (torch::unwind::unwind, the one its memory
// recorder uses with stacks="all"): it caches the unwind rules of each code address it has
// seen, where glibc's backtrace() reads the unwind tables again for every frame.
#pragma once

namespace gpumem::torch {

// Makes libgpumem.so's recorder unwind through PyTorch (gpumem_set_native_unwinder).
void UsePytorchUnwinder();

}  // namespace gpumem::torch
