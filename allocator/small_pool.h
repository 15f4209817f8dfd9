// SmallPool: requests of at most kSmallLimit bytes, served from slabs of one size class
// (size_classes.h). A slab is a block of the stream's LargePool cut into equal slots; each
// slab keeps its own free slots, and each class a list of slabs that have one, so a warm
// allocation or free is a few pointer operations. Empty slabs stay (a warm cache) until
// the allocator needs their bytes elsewhere and releases them.
// Not thread-safe: the CachingAllocator calls it under its lock.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "allocator/backend.h"
#include "allocator/large_pool.h"
#include "allocator/size_classes.h"

namespace gpumem {

struct Slab {
  Block* block = nullptr;  // the LargePool block the slab lives in
  int size_class = 0;
  std::size_t slot_bytes = 0;
  std::uint32_t count = 0;
  std::uint32_t used = 0;
  std::uint32_t fresh = 0;                // slots [fresh, count) were never handed out
  // Returned slots, reused first: a stack of free_count in room for every slot, so a free
  // never grows it (no reallocation path, and no frame for one, in the free).
  std::vector<std::uint32_t> free_slots;
  std::uint32_t free_count = 0;
  Slab* prev = nullptr;  // in its class's list of slabs with a free slot
  Slab* next = nullptr;
  bool listed = false;
};

class SmallPool {
 public:
  SmallPool() { avail_.fill(nullptr); }
  ~SmallPool();
  SmallPool(const SmallPool&) = delete;
  SmallPool& operator=(const SmallPool&) = delete;

  // A free slot of class `c`, or 0 when every slab of the class is full.
  DevicePtr Allocate(int c, Slab** slab) {
    Slab* s = avail_[c];
    if (s == nullptr) return 0;
    std::uint32_t i;
    if (s->free_count != 0) {
      i = s->free_slots[--s->free_count];
    } else {
      i = s->fresh++;
    }
    if (s->used++ == 0) empty_bytes_ -= s->block->size;
    if (s->used == s->count) Unlist(s);
    *slab = s;
    return s->block->addr + i * s->slot_bytes;
  }

  void Free(Slab* s, DevicePtr ptr) {
    s->free_slots[s->free_count++] =
        static_cast<std::uint32_t>((ptr - s->block->addr) / s->slot_bytes);
    if (--s->used == 0) empty_bytes_ += s->block->size;
    if (!s->listed) List(s);
  }

  // Makes `block` (SizeClasses::SlabBytes(c) bytes) a slab of class `c`.
  Slab* AddSlab(int c, Block* block);

  // Removes every empty slab and hands its block to `release` (a LargePool block).
  template <typename F>
  std::size_t ReleaseEmpty(F&& release) {
    std::size_t n = 0;
    std::size_t keep = 0;
    for (std::size_t i = 0; i < slabs_.size(); ++i) {
      Slab* s = slabs_[i];
      if (s->used == 0) {
        if (s->listed) Unlist(s);
        empty_bytes_ -= s->block->size;
        bytes_ -= s->block->size;
        release(s->block);
        spare_.push_back(s);  // kept with its vector's capacity: slabs come and go often
        ++n;
      } else {
        slabs_[keep++] = s;
      }
    }
    slabs_.resize(keep);
    return n;
  }

  std::size_t slab_count() const { return slabs_.size(); }
  // Bytes held by slabs.
  std::size_t bytes() const { return bytes_; }
  template <typename F>
  void ForEachSlab(F&& f) const {
    for (const Slab* s : slabs_) f(*s);
  }
  // Bytes held by slabs with no block in use.
  std::size_t empty_bytes() const { return empty_bytes_; }

 private:
  void List(Slab* s);
  void Unlist(Slab* s);

  std::array<Slab*, SizeClasses::kCount> avail_;
  std::vector<Slab*> slabs_;
  std::vector<Slab*> spare_;
  std::size_t empty_bytes_ = 0;
  std::size_t bytes_ = 0;
};

}  // namespace gpumem
