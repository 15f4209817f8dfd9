// The block list of PyTorch's caching allocator: every segment is a doubly linked list of
// blocks (allocated, free, or - in expandable segments - unmapped address space), and
// each pool keeps its free blocks ordered for best fit and its unmapped ones by address.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/container/btree_set.h"
#include "allocator/backend.h"

namespace gpumem::emulation {

class ExpandableSegment;
struct BlockPool;

struct Block {
  StreamId stream = kDefaultStream;
  std::size_t size = 0;
  std::size_t requested_size = 0;
  BlockPool* pool = nullptr;
  DevicePtr ptr = 0;
  bool allocated = false;
  bool mapped = true;  // false: address space of an expandable segment with no pages
  Block* prev = nullptr;
  Block* next = nullptr;
  int event_count = 0;  // outstanding cross-stream events (record_stream)
  std::vector<StreamId> stream_uses;  // record_stream: rare, so a plain vector
  ExpandableSegment* expandable = nullptr;

  bool is_split() const { return prev != nullptr || next != nullptr; }
  // Links this block between `before` and `after`.
  void Splice(Block* before, Block* after) {
    if (before) before->next = this;
    prev = before;
    if (after) after->prev = this;
    next = after;
  }
};

// BlockComparatorSize: stream, then size, then address - lower_bound is best fit.
struct BySize {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

// BlockComparatorAddress: stream, then address.
struct ByAddress {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return a->stream < b->stream;
    return a->ptr < b->ptr;
  }
};

struct BlockPool {
  explicit BlockPool(bool small) : is_small(small) {}
  absl::btree_set<Block*, BySize> blocks;       // free, mapped
  absl::btree_set<Block*, ByAddress> unmapped;  // expandable address space without pages
  const bool is_small;
};

// Recycles Block objects: splits and merges happen on most allocations and frees.
class BlockArena {
 public:
  Block* New() {
    if (free_.empty()) {
      chunks_.push_back(std::make_unique<Block[]>(kChunk));
      for (std::size_t i = 0; i < kChunk; ++i) free_.push_back(&chunks_.back()[i]);
    }
    Block* b = free_.back();
    free_.pop_back();
    *b = Block{};
    return b;
  }
  void Delete(Block* b) { free_.push_back(b); }

 private:
  static constexpr std::size_t kChunk = 256;
  std::vector<std::unique_ptr<Block[]>> chunks_;
  std::vector<Block*> free_;
};

}  // namespace gpumem::emulation
