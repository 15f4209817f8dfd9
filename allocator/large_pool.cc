#include "allocator/large_pool.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "allocator/size_classes.h"

namespace gpumem {

LargePool::LargePool(PageHeap& pages, std::size_t range_va_bytes, StreamId stream)
    : pages_(pages),
      page_(pages.page_bytes()),
      page_mask_(std::has_single_bit(page_) ? page_ - 1 : 0),
      stream_(stream),
      range_va_bytes_(RoundUp(range_va_bytes, page_)) {}

LargePool::~LargePool() {
  if (!lent_.empty()) {
    pages_.Quiesce();
    RetireLent(/*all=*/true);
    // What the device would not unmap goes with its range below; its events go now.
    for (const Lent& l : lent_) pages_.backend().ReleaseEvent(l.done);
  }
  // Everything goes back, used or not: the allocator is being destroyed.
  for (auto& r : ranges_) {
    if (r->segment) {
      pages_.FreeSegment(r->base, r->bytes);
    } else {
      pages_.DropRange(r->base, r->bytes);
    }
  }
}

Block* LargePool::Carve(Block* b, std::size_t bytes) {
  CountHandedOut(bytes);
  if (b->size > bytes) {
    // Put the block against the end whose page is partly used (or away from the hole the
    // rest could grow into): the rest then keeps whole pages, which can be remapped, and
    // the partly used pages fill up.
    Block* rest = NewNode();
    rest->range = b->range;
    rest->size = b->size - bytes;
    rest->free = true;
    rest->used_at = b->used_at;
    if (UsedAtEnd(b)) {
      // b keeps the front as the free rest; the new node becomes the used block.
      rest->addr = b->addr + rest->size;
      rest->size = bytes;
      LinkAfter(b, rest);
      b->size -= bytes;
      InsertFree(b);
      rest->free = false;
      return rest;
    }
    rest->addr = b->addr + bytes;
    LinkAfter(b, rest);
    b->size = bytes;
    InsertFree(rest);
  }
  b->free = false;
  return b;
}

// Carve for a block still in the free set, which stays filed under its old size: the
// split is left pending (see split_).
Block* LargePool::Split(Block* b, std::size_t bytes) {
  Block* used = NewNode();
  used->used_at = b->used_at;
  if (UsedAtEnd(b)) {
    used->addr = b->end() - bytes;
    used->size = bytes;
    LinkAfter(b, used);
    b->size -= bytes;
    split_ = {.used = used, .rest = b, .filed = b};
    return used;
  }
  Block* rest = used;
  rest->addr = b->addr + bytes;
  rest->size = b->size - bytes;
  rest->free = true;
  LinkAfter(b, rest);
  b->size = bytes;
  b->free = false;
  split_ = {.used = b, .rest = rest, .filed = b};
  return b;
}

// What Split would have done to the index at once: the rest takes the filed block's
// place, or is refiled under its own size (FreeIndex::Replace, Resize).
void LargePool::SettleSplit() const {
  const PendingSplit s = split_;
  split_ = {};
  if (s.filed == s.used) {
    index_.Replace(s.used, s.rest);
  } else {
    index_.Resize(s.rest, s.rest->size);
  }
}

Block* LargePool::BestFit(std::size_t bytes) {
  Block* b = index().BestFit(bytes);
  if (b == nullptr) return nullptr;
  free_bytes_ -= bytes;
  CountHandedOut(bytes);
  if (b->size > bytes) return Split(b, bytes);
  index_.Erase(b);
  b->free = false;
  return b;
}

Block* LargePool::CarveAt(DevicePtr addr, std::size_t bytes) {
  Block* b = nullptr;
  for (const auto& r : ranges_) {
    if (addr < r->base || addr >= r->base + r->bytes) continue;
    for (b = r->tail; b != nullptr && b->addr > addr; b = b->prev) {
    }
    break;
  }
  if (b == nullptr || !b->free || addr + bytes > b->end()) return nullptr;
  EraseFree(b);
  CountHandedOut(bytes);
  if (b->addr < addr) {  // b keeps the free front; a new node starts at addr
    Block* rest = NewNode();
    rest->addr = addr;
    rest->size = b->end() - addr;
    rest->used_at = b->used_at;
    LinkAfter(b, rest);
    b->size = addr - b->addr;
    InsertFree(b);
    b = rest;
  }
  if (b->size > bytes) {  // the free back
    Block* back = NewNode();
    back->addr = addr + bytes;
    back->size = b->size - bytes;
    back->used_at = b->used_at;
    LinkAfter(b, back);
    b->size = bytes;
    InsertFree(back);
  }
  b->free = false;
  return b;
}

Block* LargePool::Coalesce(Block* b) {
  Block* p = b->prev;
  if (p != nullptr && p->free && p->end() == b->addr) {
    EraseFree(p);
    p->size += b->size;
    p->used_at = LaterCount(p->used_at, b->used_at);
    Unlink(b);
    Recycle(b);
    b = p;
  }
  Block* n = b->next;
  if (n != nullptr && n->free && b->end() == n->addr) {
    EraseFree(n);
    b->size += n->size;
    b->used_at = LaterCount(b->used_at, n->used_at);
    Unlink(n);
    Recycle(n);
  }
  return b;
}

void LargePool::Free(Block* block, bool stream_used) {
  CountTakenBack(block->size);
  if (stream_used) block->used_at = ++free_seq_;
  if (block == split_.used && UndoSplit()) return;
  Merge(block);
}

// Coalesce and InsertFree, with the merged block's erase and insert fused where the
// index allows (FreeIndex::Resize, Replace).
void LargePool::Merge(Block* block) {
  FreeIndex& index = this->index();
  free_bytes_ += block->size;
  Block* p = block->prev;
  Block* n = block->next;
  const bool join_next = n != nullptr && n->free && block->end() == n->addr;
  if (p != nullptr && p->free && p->end() == block->addr) {
    std::size_t size = p->size + block->size;
    p->used_at = LaterCount(p->used_at, block->used_at);
    Unlink(block);
    Recycle(block);
    if (join_next) {
      size += n->size;
      p->used_at = LaterCount(p->used_at, n->used_at);
      index.Erase(n);
      Unlink(n);
      Recycle(n);
    }
    index.Resize(p, size);
    return;
  }
  block->free = true;
  if (!join_next) {
    index.Insert(block);
    return;
  }
  block->size += n->size;
  block->used_at = LaterCount(block->used_at, n->used_at);
  index.Replace(n, block);
  Unlink(n);
  Recycle(n);
}

// The free of the pending split's used block when it merges with the rest alone: the
// block so made is the one split, still filed where it was (at its exact list's head,
// where best fit found it, so where a fresh insert would put it), and the index stays as
// it is. Whether it applied. The rest is still free and next to the used block: any
// other change to blocks goes through index() first, which settles the split.
bool LargePool::UndoSplit() {
  Block* used = split_.used;
  const bool rest_after = split_.filed == used;
  Block* kept = rest_after ? used : split_.rest;
  Block* gone = rest_after ? split_.rest : used;
  // The used block's other neighbour, which a free would merge too.
  if (rest_after) {
    const Block* p = used->prev;
    if (p != nullptr && p->free && p->end() == used->addr) return false;
  } else {
    const Block* n = used->next;
    if (n != nullptr && n->free && used->end() == n->addr) return false;
  }
  split_ = {};
  free_bytes_ += used->size;
  kept->size += gone->size;
  kept->used_at = LaterCount(kept->used_at, gone->used_at);
  kept->free = true;
  Unlink(gone);
  Recycle(gone);
  return true;
}

LargePool::Plan LargePool::PlanGrowth(std::size_t bytes) const {
  Plan best;
  std::size_t best_pages = RoundUp(bytes, page_) / page_;  // a fresh range
  if (!pages_.vmm()) return best;
  // Every free block is smaller than `bytes` (best fit failed); the one that needs the
  // fewest new pages wins, which also puts its partly used pages to work. At equal pages a
  // free block beats a fresh range: a fresh range leaves that block's bytes (often the rest
  // of a range's last page) stranded in its old place and adds one more range end, while
  // growing it keeps the free bytes in one piece at the end that grows. Requests of whole
  // pages are the exception: a fresh range holds them page-aligned with nothing left over,
  // and an aligned block gives back whole pages when it is freed. (resnet50's smallest
  // device 1532 -> 1528 pages, gpt2's 3700 -> 3710; docs/allocator.md, smallest device.)
  const bool whole_pages = bytes % page_ == 0;
  for (Block* e : index().Sorted()) {
    std::size_t need = RoundUp(bytes - e->size, page_) / page_;
    if (need > best_pages) continue;
    if (need == best_pages && (best.extent != nullptr || whole_pages)) continue;
    std::size_t after = RoomAfter(e);
    std::size_t before = RoomBefore(e);
    if (after + before < need) continue;
    best.extent = e;
    best.fwd_pages = std::min(after, need);
    best.back_pages = need - best.fwd_pages;
    best_pages = need;
  }
  if (best.extent == nullptr) {
    best.fwd_pages = best_pages;
    if (ranges_.size() >= kRangesBeforeSharing) best.after_tail = RangeWithRoomAfterTail(best_pages);
  }
  return best;
}

Range* LargePool::RangeWithRoomAfterTail(std::size_t pages) const {
  for (const auto& r : ranges_) {
    const Block* tail = r->tail;
    if (r->segment || tail == nullptr || tail->free || !PageAligned(tail->end())) continue;
    if ((r->base + r->bytes - tail->end()) / page_ >= pages) return r.get();
  }
  return nullptr;
}

absl::StatusOr<Block*> LargePool::Grow(const Plan& plan, std::size_t bytes) {
  if (!pages_.vmm()) return GrowSegment(bytes);
  if (plan.after_tail != nullptr) return GrowAfterTail(plan.after_tail, plan.pages(), bytes);
  if (plan.extent == nullptr) return GrowNewRange(plan.pages(), bytes);
  return GrowExtent(plan, bytes);
}

Block* LargePool::AddRange(DevicePtr base, std::size_t va_bytes, std::size_t mapped_bytes,
                           bool segment) {
  auto& r = ranges_.emplace_back(std::make_unique<Range>());
  r->base = base;
  r->bytes = va_bytes;
  r->segment = segment;
  r->mapped_bytes = mapped_bytes;
  Block* b = NewNode();
  b->addr = base;
  b->size = mapped_bytes;
  // Its pages may be lent ones, which this stream was made to wait for: a borrower of
  // any of it waits for this stream's work from now on.
  b->used_at = ++free_seq_;
  b->range = r.get();
  r->tail = b;
  return b;
}

absl::StatusOr<Block*> LargePool::GrowSegment(std::size_t bytes) {
  const std::size_t seg_bytes = RoundUp(bytes, page_);
  absl::StatusOr<DevicePtr> base = pages_.AllocateSegment(seg_bytes);
  if (!base.ok()) return base.status();
  return Carve(AddRange(*base, seg_bytes, seg_bytes, /*segment=*/true), bytes);
}

absl::StatusOr<Block*> LargePool::GrowNewRange(std::size_t pages, std::size_t bytes) {
  std::size_t va_bytes = std::max(range_va_bytes_, pages * page_);
  absl::StatusOr<DevicePtr> base = pages_.ReserveRange(va_bytes);
  if (!base.ok() && va_bytes > pages * page_) {
    // Address space short (many ranges live): a range without room to grow still serves.
    va_bytes = pages * page_;
    base = pages_.ReserveRange(va_bytes);
  }
  if (!base.ok()) return base.status();
  if (absl::Status s = pages_.MapPages(*base, pages); !s.ok()) {
    pages_.ReleaseRange(*base, va_bytes);
    return s;
  }
  return Carve(AddRange(*base, va_bytes, pages * page_, /*segment=*/false), bytes);
}

absl::StatusOr<Block*> LargePool::GrowAfterTail(Range* r, std::size_t pages, std::size_t bytes) {
  const DevicePtr at = r->tail->end();
  if (absl::Status s = pages_.MapPages(at, pages); !s.ok()) return s;
  Block* b = NewNode();
  b->addr = at;
  b->size = pages * page_;
  b->used_at = ++free_seq_;  // its new pages, as in AddRange
  LinkAfter(r->tail, b);
  r->mapped_bytes += b->size;
  return Carve(b, bytes);
}

absl::StatusOr<Block*> LargePool::GrowExtent(const Plan& plan, std::size_t bytes) {
  Block* e = plan.extent;
  // Every page first, so that growth fails before anything is mapped or left created.
  if (absl::StatusOr<std::size_t> s = pages_.CachePages(plan.pages()); !s.ok()) {
    return s.status();
  }
  // Forward first; if the backward map then fails, the block simply keeps its new pages.
  if (plan.fwd_pages > 0) {
    if (absl::Status s = pages_.MapPages(e->end(), plan.fwd_pages); !s.ok()) return s;
    EraseFree(e);
    e->size += plan.fwd_pages * page_;
    e->range->mapped_bytes += plan.fwd_pages * page_;
    InsertFree(e);
  }
  if (plan.back_pages > 0) {
    DevicePtr at = e->addr - plan.back_pages * page_;
    if (absl::Status s = pages_.MapPages(at, plan.back_pages); !s.ok()) return s;
    EraseFree(e);
    e->addr = at;
    e->size += plan.back_pages * page_;
    e->range->mapped_bytes += plan.back_pages * page_;
    InsertFree(e);
  }
  EraseFree(e);
  e->used_at = ++free_seq_;  // its new pages, as in AddRange
  e = Coalesce(e);
  return Carve(e, bytes);
}

std::size_t LargePool::TakeIdlePages(std::size_t max, const Block* keep, bool lend,
                                     const LendHook& before_lend) {
  if (!pages_.vmm() || max == 0) return 0;
  std::vector<Block*> candidates;
  for (Block* f : index().Sorted()) {
    if (f == keep) continue;
    if (RoundUp(f->addr, page_) + page_ <= f->end() / page_ * page_) candidates.push_back(f);
  }
  // Blocks whose pages leave the fewest free bytes behind in partly used pages first
  // (smallest first among equals): those bytes sit next to a hole, where only growth
  // into it or a request that fits them can use them, and on resnet50 they were most
  // of what the smallest device needs above the peak (docs/allocator.md, min cap).
  std::stable_sort(candidates.begin(), candidates.end(), [this](const Block* a, const Block* b) {
    return StrandedBytes(a) < StrandedBytes(b);
  });
  std::size_t taken = 0;
  for (Block* f : candidates) {
    if (taken == max) break;
    taken += TakeWholePages(f, max - taken, lend, before_lend);
  }
  if (lend && taken > 0) {
    // Work queued on the stream so far is what may still use the old addresses.
    lent_.back().done = pages_.backend().RecordEvent(stream_);
  }
  return taken;
}

// Up to `max` whole pages from the end of free block `f`, top down: when the device
// refuses an unmap, the pages taken so far are still one run, and the rest stays mapped
// in `f`. Returns how many.
std::size_t LargePool::TakeWholePages(Block* f, std::size_t max, bool lend,
                                      const LendHook& before_lend) {
  const DevicePtr first = RoundUp(f->addr, page_);
  const DevicePtr last = f->end() / page_ * page_;  // end of the last whole page
  const DevicePtr lowest = last - std::min((last - first) / page_, max) * page_;
  DevicePtr cut = last;
  for (; cut > lowest; cut -= page_) {
    if (lend) {
      pages_.LendPage(cut - page_);
    } else if (!pages_.UnmapPage(cut - page_)) {
      break;
    }
  }
  const std::size_t n = (last - cut) / page_;
  if (n == 0) return 0;
  if (lend && before_lend) before_lend(cut, last - cut);
  Range* r = f->range;
  EraseFree(f);
  // What remains: [f->addr, cut) and [last, end), with a hole (or, lent, a placeholder
  // that keeps growth out until the old addresses are unmapped) between.
  if (f->end() > last) {
    Block* tail = NewNode();
    tail->addr = last;
    tail->size = f->end() - last;
    tail->used_at = f->used_at;
    LinkAfter(f, tail);
    InsertFree(tail);
  }
  if (lend) {
    Block* hole = NewNode();
    hole->addr = cut;
    hole->size = last - cut;
    LinkAfter(f, hole);
    if (lent_.empty() || lent_.back().done != 0) lent_.emplace_back();
    lent_.back().holes.push_back(hole);
    lent_pages_ += n;
  } else {
    r->mapped_bytes -= n * page_;
  }
  f->size = cut - f->addr;
  if (f->size == 0) {
    Unlink(f);
    Recycle(f);
  } else {
    InsertFree(f);
  }
  if (r->mapped_bytes == 0) ReleaseRange(r);  // no page left, so no block either
  return n;
}

std::size_t LargePool::RetireLent(bool all) {
  std::size_t retired = 0;
  if (unmapper_ != nullptr) {
    if (all) unmapper_->Drain();
    retired = CollectUnmapped();
    if (!all) {
      for (Lent& l : lent_) {
        if (l.job == nullptr) Submit(l);
      }
      lent_pages_ -= retired;
      return retired;
    }
  }
  Backend& backend = pages_.backend();
  // One stream: its events complete in order, so the first pending one ends the search.
  while (!lent_.empty() && (all || backend.EventCompleted(lent_.front().done))) {
    std::vector<Block*>& holes = lent_.front().holes;
    while (!holes.empty() && RetireHole(holes.back(), &retired)) holes.pop_back();
    // The device refused an unmap: this stitch's event is kept, and asked again later.
    if (!holes.empty()) break;
    backend.ReleaseEvent(lent_.front().done);
    lent_.pop_front();
  }
  lent_pages_ -= retired;
  return retired;
}

void LargePool::Submit(Lent& l) {
  auto job = std::make_shared<UnmapJob>();
  job->done = l.done;
  job->page_bytes = page_;
  for (const Block* hole : l.holes) job->runs.push_back({hole->addr, hole->size / page_, 0});
  l.job = job;
  unmapper_->Submit(std::move(job));
}

std::size_t LargePool::CollectUnmapped() {
  std::size_t retired = 0;
  for (auto it = lent_.begin(); it != lent_.end();) {
    Lent& l = *it;
    if (l.job == nullptr || !l.job->finished.load(std::memory_order_acquire)) {
      ++it;
      continue;
    }
    std::vector<UnmapJob::Run>& runs = l.job->runs;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      for (std::size_t k = 0; k < runs[i].unmapped; ++k) {
        pages_.ForgetLent(runs[i].base + (runs[i].pages - k - 1) * page_);
      }
      retired += runs[i].unmapped;
      if (ShrinkHole(l.holes[i], runs[i].unmapped)) l.holes[i] = nullptr;
    }
    std::erase(l.holes, nullptr);
    l.job.reset();  // what the device refused is handed over again later
    if (!l.holes.empty()) {
      ++it;
      continue;
    }
    pages_.backend().ReleaseEvent(l.done);
    it = lent_.erase(it);
  }
  return retired;
}

// Unmaps the old addresses of a lent hole, top down, adding the pages to `retired`.
// Whether all went: if the device refuses one, the hole shrinks to the pages still mapped.
bool LargePool::RetireHole(Block* hole, std::size_t* retired) {
  DevicePtr end = hole->end();
  while (end > hole->addr && pages_.RetireLent(end - page_)) end -= page_;
  const std::size_t pages = (hole->end() - end) / page_;
  *retired += pages;
  return ShrinkHole(hole, pages);
}

bool LargePool::ShrinkHole(Block* hole, std::size_t pages) {
  const std::size_t bytes = pages * page_;
  Range* r = hole->range;
  r->mapped_bytes -= bytes;
  if (bytes < hole->size) {
    hole->size -= bytes;
    return false;
  }
  Unlink(hole);
  Recycle(hole);
  if (r->mapped_bytes == 0) ReleaseRange(r);  // its last pages: no block is left
  return true;
}

void LargePool::ReleaseRange(Range* r) {
  pages_.ReleaseRange(r->base, r->bytes);
  auto it = std::find_if(ranges_.begin(), ranges_.end(),
                         [r](const std::unique_ptr<Range>& p) { return p.get() == r; });
  ranges_.erase(it);
}

std::size_t LargePool::StrandedBytes(const Block* f) const {
  return (RoundUp(f->addr, page_) - f->addr) + (f->end() - f->end() / page_ * page_);
}

std::size_t LargePool::IdlePages() const {
  std::size_t n = 0;
  for (const Block* f : index().Sorted()) {
    DevicePtr first = RoundUp(f->addr, page_);
    DevicePtr last = f->end() / page_ * page_;
    if (last > first) n += (last - first) / page_;
  }
  return n;
}

std::size_t LargePool::ReleaseFreeSegments() {
  std::vector<Block*> whole;
  for (Block* f : index().Sorted()) {
    if (f->range->segment && f->addr == f->range->base && f->size == f->range->bytes) {
      whole.push_back(f);
    }
  }
  std::size_t released = 0;
  for (Block* f : whole) {
    Range* r = f->range;
    EraseFree(f);
    Recycle(f);
    pages_.FreeSegment(r->base, r->bytes);
    released += r->bytes;
    auto it = std::find_if(ranges_.begin(), ranges_.end(),
                           [r](const std::unique_ptr<Range>& p) { return p.get() == r; });
    ranges_.erase(it);
  }
  return released;
}

std::size_t LargePool::largest_free() const {
  const Block* b = index().Largest();
  return b == nullptr ? 0 : b->size;
}

}  // namespace gpumem
