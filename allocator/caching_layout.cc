// The caching allocator's memory layout for snapshots (torch.cuda.memory_snapshot): every
// heap's mapped runs and slabs as segments, with their blocks in address order.
#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "allocator/caching_allocator_impl.h"

namespace gpumem {
namespace {

void AddToSegment(LayoutSegment& seg, const LayoutBlock& b) {
  seg.total_size += b.size;
  if (b.state == LayoutBlock::kAllocated) {
    seg.allocated_size += b.size;
    seg.requested_size += b.requested;
  }
  // Neighbouring free slots show as one free block.
  if (b.state == LayoutBlock::kFree && !seg.blocks.empty() &&
      seg.blocks.back().state == LayoutBlock::kFree) {
    seg.blocks.back().size += b.size;
    return;
  }
  seg.blocks.push_back(b);
}

}  // namespace

std::vector<LayoutSegment> CachingAllocator::Layout() const {
  std::lock_guard lock(mu_);
  LockedCaches caches(caches_);
  std::vector<LayoutSegment> out;
  for (const auto& [key, h] : heaps_) AppendLayout(*h, &out);
  std::sort(out.begin(), out.end(), [](const LayoutSegment& a, const LayoutSegment& b) {
    return a.address < b.address;
  });
  return out;
}

const LiveBlock* CachingAllocator::FindRecord(DevicePtr ptr) const {
  if (const LiveBlock* r = live_.Find(ptr)) return r;
  for (const std::shared_ptr<ThreadCache>& c : caches_) {
    if (const LiveBlock* r = c->FindRecord(ptr)) return r;
  }
  return nullptr;
}

// A block at `ptr` of `size` bytes as the layout shows it; false for a lent page's
// placeholder, which no one uses (its page is counted where it is mapped now).
bool CachingAllocator::LayoutBlockAt(DevicePtr ptr, std::size_t size, bool free,
                                     LayoutBlock* out) const {
  *out = {.address = ptr, .size = size};
  if (free) return true;
  const LiveBlock* r = FindRecord(ptr);
  if (r == nullptr) return false;
  if (r->cached) return true;  // free, held by a thread's cache
  out->requested = r->requested;
  out->state = r->pending ? LayoutBlock::kPendingFree : LayoutBlock::kAllocated;
  return true;
}

// Each maximal run of mapped memory outside slabs (or a segment without VMM) of the
// heap, and each slab, as segments. mu_ and every cache's lock held.
void CachingAllocator::AppendLayout(const StreamHeap& h,
                                    std::vector<LayoutSegment>* out) const {
  absl::flat_hash_map<DevicePtr, const Slab*> slabs;
  h.small.ForEachSlab([&](const Slab& s) { slabs.emplace(s.block->addr, &s); });
  LayoutSegment empty;
  empty.stream = h.stream;
  empty.pool = h.pool;
  h.large.ForEachRange([&](const Range&, const std::vector<const Block*>& blocks) {
    std::size_t open = 0;  // the segment the next contiguous block joins, +1; 0: none
    for (const Block* b : blocks) {
      if (auto it = slabs.find(b->addr); it != slabs.end() && !b->free) {
        out->push_back(SlabSegment(*it->second, empty));
        open = 0;
        continue;
      }
      LayoutBlock lb;
      if (!LayoutBlockAt(b->addr, b->size, b->free, &lb)) {
        open = 0;
        continue;
      }
      if (open == 0 || (*out)[open - 1].address + (*out)[open - 1].total_size != b->addr) {
        out->push_back(empty);
        out->back().address = b->addr;
        open = out->size();
      }
      AddToSegment((*out)[open - 1], lb);
    }
  });
}

LayoutSegment CachingAllocator::SlabSegment(const Slab& s, const LayoutSegment& empty) const {
  LayoutSegment seg = empty;
  seg.address = s.block->addr;
  seg.is_small = true;
  for (std::uint32_t i = 0; i < s.count; ++i) {
    const DevicePtr p = s.block->addr + i * s.slot_bytes;
    LayoutBlock lb{.address = p, .size = s.slot_bytes};
    if (i < s.fresh) LayoutBlockAt(p, s.slot_bytes, /*free=*/false, &lb);
    AddToSegment(seg, lb);
  }
  const std::size_t tail = s.block->size - s.count * s.slot_bytes;
  if (tail > 0) AddToSegment(seg, {.address = s.block->end() - tail, .size = tail});
  return seg;
}

}  // namespace gpumem
