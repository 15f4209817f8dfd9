// LargePool: best-fit with split and coalesce over the mapped bytes of one stream's
// ranges, plus growth. Blocks are carved contiguously from mapped ranges, so large blocks
// share pages and waste at most the tail of one page where a range ends.
//
// With VMM a range is a large virtual reservation of which only some pages are mapped;
// every mapped byte belongs to exactly one block (free or not), and unmapped pages are
// holes. When no free block fits, growth maps pages into the hole next to the free block
// that needs the fewest new pages (using its partly used page), or into a fresh range;
// whole pages inside free blocks are idle and can be unmapped and mapped wherever a
// request needs them (stitching: that is how this allocator defragments).
// A stitch need not wait for the device: idle pages are lent (mapped at the new address
// while the old one stays mapped, see PageHeap::LendPage) and the old addresses, held by
// placeholder blocks, are unmapped once an event recorded on this pool's stream says the
// work that used them is done (on the allocator's BackgroundUnmapper thread if it has
// one). A stitch for another stream makes that stream wait for the event
// (Backend::StreamWaitEvent) before its new block is used.
// Without VMM a range is a plain segment; growth allocates a new one.
// Not thread-safe: the CachingAllocator calls it under its lock.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/backend.h"
#include "allocator/background_unmapper.h"
#include "allocator/free_index.h"
#include "allocator/page_heap.h"
#include "allocator/usage_meter.h"

namespace gpumem {

struct Range {
  DevicePtr base = 0;
  std::size_t bytes = 0;         // virtual bytes reserved (segment: its size)
  bool segment = false;
  std::size_t mapped_bytes = 0;  // VMM: bytes backed by pages
  Block* tail = nullptr;         // the block with the highest address
};

class LargePool {
 public:
  // How to grow for a request no free block can hold.
  struct Plan {
    Block* extent = nullptr;    // the free block to extend; null: new pages of their own
    // With no extent: the range whose used last block the new pages go after, in its
    // unmapped room; null: a fresh range (or segment).
    Range* after_tail = nullptr;
    std::size_t back_pages = 0;  // pages mapped before it
    std::size_t fwd_pages = 0;   // pages mapped after it
    std::size_t pages() const { return back_pages + fwd_pages; }
  };

  // `range_va_bytes`: virtual bytes reserved per range (room to grow in place).
  LargePool(PageHeap& pages, std::size_t range_va_bytes, StreamId stream = kDefaultStream);
  ~LargePool();
  LargePool(const LargePool&) = delete;
  LargePool& operator=(const LargePool&) = delete;

  // The smallest free block of at least `bytes` (a multiple of kBlockAlign), split to
  // size and marked used; null if none.
  Block* BestFit(std::size_t bytes);
  // The size of the block BestFit(bytes) would split, without taking it; 0 if none.
  std::size_t FitSize(std::size_t bytes) const {
    const Block* b = index().BestFit(bytes);
    return b == nullptr ? 0 : b->size;
  }
  // The free memory [addr, addr + bytes) of one range, split out and marked used; null if
  // any of it is not free. Restores a block where it was (a checkpointed pool state).
  Block* CarveAt(DevicePtr addr, std::size_t bytes);
  // Returns a used block; it coalesces with free neighbours. `stream_used`: this pool's
  // stream used it (its used_at becomes a new free count); false for a block that only
  // another stream used since its last free here (one lent by CachingAllocator::Borrow).
  void Free(Block* block, bool stream_used = true);
  // Frees so far (wrapping): with Block::used_at, what work of this pool's stream a
  // block may still be touched by.
  std::uint32_t free_seq() const { return free_seq_; }

  // VMM: the cheapest way to grow for `bytes`, in new pages; at equal pages a free block
  // rather than new pages of their own, unless `bytes` is whole pages. New pages of their
  // own get a fresh range, whose room lets the block grow in place once freed, until the
  // pool holds kRangesBeforeSharing ranges; from then on they go after the used last
  // block of a range with room for them where there is one. A run that keeps what it
  // allocates (a buffer never trimmed) would otherwise reserve a range of address space
  // per block: thousands of 16 GiB reservations, until the address space runs short.
  static constexpr std::size_t kRangesBeforeSharing = 256;
  Plan PlanGrowth(std::size_t bytes) const;
  // Maps the plan's pages (cached pages first) or allocates a segment, and returns a used
  // block of `bytes`. ResourceExhausted when the device has no room.
  absl::StatusOr<Block*> Grow(const Plan& plan, std::size_t bytes);

  // Unmaps up to `max` idle pages (whole pages inside free blocks, never in `keep`) into
  // the page cache, from the free blocks with the fewest StrandedBytes first, then the
  // smallest. Returns how many (fewer where the device refuses an unmap: those pages
  // stay where they are). With `lend`, the pages are lent instead (no synchronization):
  // only the Grow called next may map them, of this pool or of a pool whose stream was
  // made to wait for last_lend_event(). `before_lend` is told each run of pages lent,
  // before that event is recorded: the caller orders this stream after the other work
  // that may still use them.
  using LendHook = std::function<void(DevicePtr addr, std::size_t bytes)>;
  std::size_t TakeIdlePages(std::size_t max, const Block* keep, bool lend = false,
                            const LendHook& before_lend = {});
  // The event recorded on this pool's stream by the last TakeIdlePages that lent pages
  // (0 if none, or if the device could not record one and waited instead).
  EventHandle last_lend_event() const { return lent_.empty() ? 0 : lent_.back().done; }
  // Unmaps the old addresses of lent pages whose stream work is done (all of them with
  // `all`: the caller waited for the device). Returns how many pages. Those the device
  // refuses to unmap stay lent, their placeholders in place, until a later call.
  // With an unmapper, the unmaps run on its thread: a call collects what it finished
  // and hands it the rest (which it unmaps once their work is done); `all` waits for it.
  std::size_t RetireLent(bool all);
  void set_unmapper(BackgroundUnmapper* unmapper) { unmapper_ = unmapper; }
  std::size_t lent_pages() const { return lent_pages_; }
  // Whole pages inside free blocks.
  std::size_t IdlePages() const;
  // The bytes of free block `f` in pages it shares with its neighbours: what taking all
  // of its whole pages leaves behind, cut off from the rest by the new hole.
  std::size_t StrandedBytes(const Block* f) const;
  // Without VMM: returns segments that are entirely free. Returns bytes released.
  std::size_t ReleaseFreeSegments();

  std::size_t largest_free() const;
  std::size_t free_bytes() const { return free_bytes_; }
  // Counts the bytes this pool hands out, and takes back, on `meter` too (null: nowhere).
  // A pool destroyed with blocks out leaves them counted: give it none then.
  void set_meter(UsageMeter* meter) { meter_ = meter; }
  std::size_t range_count() const { return ranges_.size(); }

  // Calls f(range, blocks) for every range, its blocks in address order.
  template <typename F>
  void ForEachRange(F&& f) const {
    std::vector<const Block*> blocks;
    for (const auto& r : ranges_) {
      blocks.clear();
      for (const Block* b = r->tail; b != nullptr; b = b->prev) blocks.push_back(b);
      std::reverse(blocks.begin(), blocks.end());
      f(*r, blocks);
    }
  }

  // For tests: calls f(block) for every block, free or used.
  template <typename F>
  void ForEachBlock(F&& f) const {
    for (const Block& b : nodes_) {
      if (b.range != nullptr) f(b);
    }
  }

 private:
  // Spare nodes are linked through `next` (range null marks them, see ForEachBlock).
  Block* NewNode() {
    if (spare_ == nullptr) return &nodes_.emplace_back();
    Block* b = spare_;
    spare_ = b->next;
    b->next = nullptr;
    return b;
  }
  void Recycle(Block* b) {
    *b = Block{};
    b->next = spare_;
    spare_ = b;
  }
  void Unlink(Block* b) {
    if (b->prev != nullptr) b->prev->next = b->next;
    if (b->next != nullptr) b->next->prev = b->prev;
    if (b->range->tail == b) b->range->tail = b->prev;
  }
  // Links `b` right after `at` (same range).
  void LinkAfter(Block* at, Block* b) {
    b->range = at->range;
    b->prev = at;
    b->next = at->next;
    if (at->next != nullptr) at->next->prev = b;
    at->next = b;
    if (at->range->tail == at) at->range->tail = b;
  }
  void InsertFree(Block* b) {
    b->free = true;
    index().Insert(b);
    free_bytes_ += b->size;
  }
  void EraseFree(Block* b) {
    index().Erase(b);
    free_bytes_ -= b->size;
  }
  void CountHandedOut(std::size_t bytes) {
    if (meter_ != nullptr) meter_->Add(bytes);
  }
  void CountTakenBack(std::size_t bytes) {
    if (meter_ != nullptr) meter_->Sub(bytes);
  }
  // Whether a block carved from free block `b` goes against its end (see Carve): its
  // first page is its own and its last is not, or both are and there is a hole before it
  // but none after. Masks and compares, not RoomBefore's divisions: this is on every split.
  bool UsedAtEnd(const Block* b) const {
    if (!PageAligned(b->addr)) return false;
    if (!PageAligned(b->end())) return true;
    const DevicePtr before = b->prev != nullptr ? b->prev->end() : b->range->base;
    if (b->addr - before < page_) return false;
    const DevicePtr after = b->next != nullptr ? b->next->addr : b->range->base + b->range->bytes;
    return after - b->end() < page_;
  }
  bool PageAligned(DevicePtr a) const {
    return page_mask_ != 0 ? (a & page_mask_) == 0 : a % page_ == 0;
  }
  // BestFit's split of free block `b` (still indexed) for a used block of `bytes`.
  Block* Split(Block* b, std::size_t bytes);
  // The index, with a pending split filed first: for every use but BestFit's and Free's.
  FreeIndex& index() const {
    if (split_.used != nullptr) SettleSplit();
    return index_;
  }
  void SettleSplit() const;
  bool UndoSplit();
  // Free's coalescing of a used block with its free neighbours (a pending split settled
  // first).
  void Merge(Block* block);
  // Marks a free block (already out of the free set) used, splitting off the rest.
  Block* Carve(Block* b, std::size_t bytes);
  // Grow's four ways: a cudaMalloc segment, a fresh VMM range, pages mapped after a
  // range's used last block, or pages mapped onto the ends of a free block.
  absl::StatusOr<Block*> GrowSegment(std::size_t bytes);
  absl::StatusOr<Block*> GrowNewRange(std::size_t pages, std::size_t bytes);
  absl::StatusOr<Block*> GrowAfterTail(Range* r, std::size_t pages, std::size_t bytes);
  // The first range whose last block is used, ends on a page and has `pages` unmapped
  // pages after it; null if none.
  Range* RangeWithRoomAfterTail(std::size_t pages) const;
  absl::StatusOr<Block*> GrowExtent(const Plan& plan, std::size_t bytes);
  // A new range (or segment) whose first `mapped_bytes` are one free block, returned out
  // of the free set.
  Block* AddRange(DevicePtr base, std::size_t va_bytes, std::size_t mapped_bytes, bool segment);
  // Merges a free block (out of the free set) with adjacent free neighbours.
  Block* Coalesce(Block* b);
  void ReleaseRange(Range* r);
  std::size_t TakeWholePages(Block* f, std::size_t max, bool lend, const LendHook& before_lend);
  bool RetireHole(Block* hole, std::size_t* retired);
  // Whole pages of the hole after (before) `b`, if its last (first) page is its own.
  std::size_t RoomAfter(const Block* b) const {
    if (b->end() % page_ != 0) return 0;  // the rest of its last page is used
    DevicePtr limit = b->next != nullptr ? b->next->addr : b->range->base + b->range->bytes;
    return (limit - b->end()) / page_;
  }
  std::size_t RoomBefore(const Block* b) const {
    if (b->addr % page_ != 0) return 0;
    DevicePtr limit = b->prev != nullptr ? b->prev->end() : b->range->base;
    return (b->addr - limit) / page_;
  }

  // The old addresses of one stitch's lent pages (placeholder blocks), and an event
  // recorded on the stream after the work that may still use them.
  struct Lent {
    std::vector<Block*> holes;
    EventHandle done = 0;
    std::shared_ptr<UnmapJob> job;  // with the unmapper: its holes are being unmapped
  };
  // Hands `l`'s holes to the unmapper.
  void Submit(Lent& l);
  // Applies the unmapper's finished jobs; returns how many pages went.
  std::size_t CollectUnmapped();
  // A hole whose top `pages` pages were unmapped: shrunk, or gone (whether it is).
  bool ShrinkHole(Block* hole, std::size_t pages);

  PageHeap& pages_;
  const std::size_t page_;
  const std::size_t page_mask_;  // page_ - 1 if page_ is a power of two (always on CUDA), or 0
  const StreamId stream_;
  std::deque<Lent> lent_;  // oldest first
  BackgroundUnmapper* unmapper_ = nullptr;
  std::size_t lent_pages_ = 0;
  const std::size_t range_va_bytes_;
  // The free blocks for best fit. A split leaves the block it split filed under its old
  // size, pending in split_, until the next use of the index files the rest
  // (SettleSplit): a free of the used part that merges it back into the same block then
  // undoes the split without touching the index, as a loop allocating and freeing one
  // size does every time. Settled, the index is what filing at once would have made it.
  struct PendingSplit {
    Block* used = nullptr;   // handed out; null: none pending
    Block* rest = nullptr;   // the free rest
    Block* filed = nullptr;  // the one of them filed under the unsplit size
  };
  mutable FreeIndex index_;
  mutable PendingSplit split_;
  std::size_t free_bytes_ = 0;
  UsageMeter* meter_ = nullptr;
  std::uint32_t free_seq_ = 0;
  std::deque<Block> nodes_;       // stable storage; range == nullptr marks a spare node
  Block* spare_ = nullptr;
  std::vector<std::unique_ptr<Range>> ranges_;
};

}  // namespace gpumem
