// The C entry points of libgpumem_torch (for ctypes) run C++ that reports failure by
// throwing: this turns an exception into -1 and its message into the caller's buffer.
#pragma once

#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdio>
#include <exception>

namespace gpumem::torch {

// Runs `f`; 0 and an empty message if it returns, -1 and the exception's message
// (without PyTorch's C++ backtrace) in err[0..len) if it throws. `err` may be null.
template <typename F>
int CatchToCError(F&& f, char* err, std::size_t len) {
  const bool has_buffer = err != nullptr && len > 0;
  try {
    f();
    if (has_buffer) err[0] = '\0';
    return 0;
  } catch (const c10::Error& e) {
    if (has_buffer) std::snprintf(err, len, "%s", e.what_without_backtrace());
  } catch (const std::exception& e) {
    if (has_buffer) std::snprintf(err, len, "%s", e.what());
  }
  return -1;
}

}  // namespace gpumem::torch
