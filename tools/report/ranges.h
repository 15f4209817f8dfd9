// Device memory held by the allocator, as disjoint address ranges (segments, or mapped
// pages of expandable segments merged where they touch).
#pragma once

#include <cstdint>
#include <map>

namespace gpumem::report {

class RangeSet {
 public:
  void Add(std::uint64_t addr, std::uint64_t size);
  // Removes whatever part of [addr, addr + size) is held; returns the bytes removed.
  std::uint64_t Remove(std::uint64_t addr, std::uint64_t size);
  // begin -> end, disjoint and not touching.
  const std::map<std::uint64_t, std::uint64_t>& ranges() const { return ranges_; }

 private:
  std::map<std::uint64_t, std::uint64_t> ranges_;
};

}  // namespace gpumem::report
