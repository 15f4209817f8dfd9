// The caching allocator's records of blocks handed out, by address. The locked path does
// one insert per allocation and one find and erase per free: absl::flat_hash_map's
// out-of-line insert, find and erase cost ~200 instructions per alloc+free pair through the
// C ABI (callgrind, sim backend), this table a few dozen. Open addressing with linear
// probing over an array of keys (8 to a cache line), the records beside it, and erase by
// backward shift, so no tombstones build up under the alloc/free churn. Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "allocator/backend.h"
#include "allocator/thread_cache.h"

namespace gpumem {

class LiveMap {
 public:
  LiveMap() { Rehash(kMinCapacity); }
  LiveMap(const LiveMap&) = delete;
  LiveMap& operator=(const LiveMap&) = delete;

  // Room for `n` records before the table grows.
  void reserve(std::size_t n);
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The record of `ptr`, or null. Valid until the next Insert or Erase.
  LiveBlock* Find(DevicePtr ptr) {
    for (std::size_t i = Home(ptr);; i = (i + 1) & mask_) {
      if (keys_[i] == kEmpty) return nullptr;
      if (keys_[i] == ptr) return &values_[i];
    }
  }
  const LiveBlock* Find(DevicePtr ptr) const { return const_cast<LiveMap*>(this)->Find(ptr); }

  // Records `live` for `ptr`; false (and nothing changed) if `ptr` has a record already.
  bool Insert(DevicePtr ptr, const LiveBlock& live) {
    if (size_ >= max_size_) Rehash(2 * (mask_ + 1));
    for (std::size_t i = Home(ptr);; i = (i + 1) & mask_) {
      if (keys_[i] == kEmpty) {
        keys_[i] = ptr;
        values_[i] = live;
        ++size_;
        return true;
      }
      if (keys_[i] == ptr) return false;
    }
  }

  // Erases the record `found` (from Find).
  void Erase(LiveBlock* found) {
    std::size_t hole = static_cast<std::size_t>(found - values_.get());
    // Each record after the hole in its run moves back into it unless its home slot lies
    // between the hole and where it is now (it would no longer be found).
    for (std::size_t j = (hole + 1) & mask_; keys_[j] != kEmpty; j = (j + 1) & mask_) {
      if (((j - Home(keys_[j])) & mask_) >= ((j - hole) & mask_)) {
        keys_[hole] = keys_[j];
        values_[hole] = values_[j];
        hole = j;
      }
    }
    keys_[hole] = kEmpty;
    --size_;
  }

  // Calls f(ptr, live) for every record, in no particular order. `f` must not insert or
  // erase.
  template <typename F>
  void ForEach(F&& f) const {
    for (std::size_t i = 0; i <= mask_; ++i) {
      if (keys_[i] != kEmpty) f(keys_[i], values_[i]);
    }
  }

 private:
  // No block's address: blocks are aligned, and none ends at the top of the address space.
  static constexpr DevicePtr kEmpty = ~DevicePtr{0};
  static constexpr std::size_t kMinCapacity = 16;

  // Fibonacci hashing: the top bits of the product spread aligned addresses evenly.
  std::size_t Home(DevicePtr ptr) const {
    return static_cast<std::size_t>((ptr * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  // A table of `capacity` slots (a power of two) holding the records there are.
  void Rehash(std::size_t capacity);

  std::unique_ptr<DevicePtr[]> keys_;
  std::unique_ptr<LiveBlock[]> values_;
  std::size_t mask_ = 0;      // capacity - 1
  unsigned shift_ = 64;       // 64 - log2(capacity)
  std::size_t size_ = 0;
  std::size_t max_size_ = 0;  // 3/4 of the capacity: probe runs stay short
};

}  // namespace gpumem
