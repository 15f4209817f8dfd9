// What the trace tests share: where the real traces are, and whether this is a sanitizer
// build (those run the same checks on fewer inputs; the plain build covers the rest).
#pragma once

#include <string>

namespace gpumem::trace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

inline std::string Data(const std::string& file) {
  return std::string(GPUMEM_TEST_DATA) + "/" + file;
}

}  // namespace gpumem::trace
