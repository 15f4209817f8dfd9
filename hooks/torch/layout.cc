#include "hooks/torch/layout.h"

namespace gpumem::torch {

Layout ReadLayout(int device) {
  Layout l;
  for (;;) {
    std::size_t block_total = 0;
    const std::size_t n = gpumem_layout(device, l.segments.data(), l.segments.size(),
                                        l.blocks.data(), l.blocks.size(), &block_total);
    if (n <= l.segments.size() && block_total <= l.blocks.size()) {
      l.segments.resize(n);
      l.blocks.resize(block_total);
      return l;
    }
    l.segments.resize(n + 16);
    l.blocks.resize(block_total + 256);
  }
}

std::string LastGpumemError() {
  std::string s(gpumem_last_error(nullptr, 0), '\0');
  gpumem_last_error(s.data(), s.size());
  s.resize(s.size() - 1);
  return s;
}

}  // namespace gpumem::torch
