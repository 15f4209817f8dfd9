#include "allocator/live_map.h"

#include <bit>
#include <utility>

namespace gpumem {

void LiveMap::reserve(std::size_t n) {
  std::size_t capacity = mask_ + 1;
  while (n > capacity / 4 * 3) capacity *= 2;
  if (capacity != mask_ + 1) Rehash(capacity);
}

void LiveMap::Rehash(std::size_t capacity) {
  std::unique_ptr<DevicePtr[]> old_keys = std::move(keys_);
  std::unique_ptr<LiveBlock[]> old_values = std::move(values_);
  const std::size_t old_capacity = old_keys == nullptr ? 0 : mask_ + 1;
  keys_ = std::make_unique<DevicePtr[]>(capacity);
  values_ = std::make_unique<LiveBlock[]>(capacity);
  for (std::size_t i = 0; i < capacity; ++i) keys_[i] = kEmpty;
  mask_ = capacity - 1;
  shift_ = 64 - static_cast<unsigned>(std::countr_zero(capacity));
  max_size_ = capacity / 4 * 3;
  size_ = 0;
  for (std::size_t i = 0; i < old_capacity; ++i) {
    if (old_keys[i] != kEmpty) Insert(old_keys[i], old_values[i]);
  }
}

}  // namespace gpumem
