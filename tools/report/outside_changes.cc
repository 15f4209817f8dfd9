#include "tools/report/outside_changes.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "tools/report/outside_library.h"

namespace gpumem::report {
namespace {

using trace::Action;
using Span = std::pair<std::uint64_t, std::uint64_t>;  // (address, size)

bool Grows(Action a) { return a == Action::kSegmentAlloc || a == Action::kSegmentMap; }
bool Shrinks(Action a) { return a == Action::kSegmentFree || a == Action::kSegmentUnmap; }

// The allocator's own segments and maps as the CUPTI trace sees them again: PyTorch's
// cudaMalloc of a segment, the physical memory gpumem (or expandable segments) maps.
struct OwnSpans {
  absl::flat_hash_set<Span> segments;
  absl::flat_hash_set<Span> maps;
};

// The allocator's own segments and maps (no API frame).
OwnSpans AddReserved(const trace::Trace& t, int device, std::vector<MemoryChange>* out) {
  OwnSpans own;
  for (const trace::Event& e : t.events) {
    if (e.device != device || !(Grows(e.action) || Shrinks(e.action))) continue;
    if (IsDriverCall(t, e.stack_id)) continue;
    const auto bytes = static_cast<std::int64_t>(e.size);
    out->push_back({e.time_us, kReservedBucket, Grows(e.action) ? bytes : -bytes});
    if (e.action == Action::kSegmentAlloc) own.segments.insert({e.addr, e.size});
    if (e.action == Action::kSegmentMap) own.maps.insert({e.addr, e.size});
  }
  return own;
}

// The bucket of an outside allocation, or nullopt for the allocator's own memory.
std::optional<std::uint8_t> BucketOf(const trace::Trace& t, const trace::Event& e,
                                     const OwnSpans& own) {
  if (e.device < 0) return kPinnedBucket;
  if (own.segments.contains(Span{e.addr, e.size})) return std::nullopt;
  const OutsideLibrary library = LibraryOfStack(t, e.stack_id);
  if (library == OutsideLibrary::kAllocator) return std::nullopt;
  return static_cast<std::uint8_t>(library);
}

// Device memory other libraries took through the driver (segment records with an API
// frame), walked in the CUPTI trace's order.
class OutsideWalk {
 public:
  OutsideWalk(const trace::Trace& t, std::int64_t shift_us, const OwnSpans& own,
              std::vector<MemoryChange>* out)
      : t_(t), shift_us_(shift_us), own_(own), out_(out) {}

  void Alloc(const trace::Event& e) {
    const std::optional<std::uint8_t> bucket = BucketOf(t_, e, own_);
    if (!bucket) return;
    live_[Key(e)] = {*bucket, e.size};
    out_->push_back({e.time_us + shift_us_, *bucket, static_cast<std::int64_t>(e.size)});
    if (e.device >= 0) created_[e.thread] = {Key(e), out_->size() - 1};
  }
  // A free takes its block's bucket and size.
  void Free(const trace::Event& e) {
    auto it = live_.find(Key(e));
    if (it == live_.end()) return;
    out_->push_back({e.time_us + shift_us_, it->second.bucket,
                     -static_cast<std::int64_t>(it->second.size)});
    live_.erase(it);
  }
  // Physical memory the thread created just before, mapped where the allocator says it
  // mapped its own pages: the allocator's, not outside.
  void Map(const trace::Event& e) {
    auto c = created_.find(e.thread);
    if (c == created_.end()) return;
    auto it = live_.find(c->second.key);
    if (it != live_.end() && it->second.size == e.size && own_.maps.contains({e.addr, e.size})) {
      (*out_)[c->second.change].bytes = 0;
      live_.erase(it);
    }
    created_.erase(c);
  }

 private:
  struct Live {
    std::uint8_t bucket;
    std::uint64_t size;
  };
  struct Created {
    Span key;
    std::size_t change;
  };
  static Span Key(const trace::Event& e) { return {static_cast<std::uint64_t>(e.device), e.addr}; }

  const trace::Trace& t_;
  std::int64_t shift_us_;
  const OwnSpans& own_;
  std::vector<MemoryChange>* out_;
  absl::flat_hash_map<Span, Live> live_;            // by (device, address or handle)
  absl::flat_hash_map<std::uint32_t, Created> created_;  // by thread: its last allocation
};

// Returns whether `t` has any of the CUPTI tracer's memory records for the device.
bool AddOutside(const trace::Trace& t, std::int64_t shift_us, int device, const OwnSpans& own,
                std::vector<MemoryChange>* out) {
  OutsideWalk walk(t, shift_us, own, out);
  bool any = false;
  for (const trace::Event& e : t.events) {
    if (!Grows(e.action) && !Shrinks(e.action)) continue;
    if ((e.device != device && e.device != -1) || !IsDriverCall(t, e.stack_id)) continue;
    any = true;
    if (e.action == Action::kSegmentAlloc) walk.Alloc(e);
    if (e.action == Action::kSegmentFree) walk.Free(e);
    if (e.action == Action::kSegmentMap) walk.Map(e);
  }
  return any;
}


std::vector<DriverSample> Samples(const trace::Trace& t, int device) {
  std::vector<DriverSample> out;
  for (const trace::Event& e : t.events) {
    if (e.action != Action::kStep || e.addr == 0 || e.device != device) continue;
    std::optional<std::uint64_t> total;
    if (e.stream != 0) total = e.stream;
    out.push_back({e.time_us, e.size, e.addr, total});
  }
  return out;
}

}  // namespace

std::optional<std::uint64_t> DriverTotal(const trace::Trace& t, int device) {
  for (const trace::Event& e : t.events) {
    if (e.action == Action::kStep && e.device == device && e.addr != 0 && e.stream != 0) {
      return e.stream;
    }
  }
  for (const trace::CapacityChange& c : t.capacity_changes) {
    if (c.device == device && c.source == trace::CapacitySource::kDeviceTotal) return c.bytes;
  }
  return std::nullopt;
}

OutsideChanges CollectOutsideChanges(const trace::Trace& trace, const trace::Trace* cupti,
                                     int device) {
  OutsideChanges out;
  const OwnSpans own = AddReserved(trace, device, &out.changes);
  out.calls_recorded = AddOutside(trace, 0, device, own, &out.changes);
  if (cupti != nullptr) {
    out.calls_recorded |= AddOutside(*cupti, CuptiShiftUs(trace, *cupti), device, own, &out.changes);
  }
  std::stable_sort(
      out.changes.begin(), out.changes.end(),
      [](const MemoryChange& a, const MemoryChange& b) { return a.time_us < b.time_us; });
  out.samples = Samples(trace, device);
  return out;
}

std::int64_t CuptiShiftUs(const trace::Trace& main, const trace::Trace& cupti) {
  if (!main.run.clock_origin_ns || !cupti.run.clock_origin_ns) return 0;
  return (*cupti.run.clock_origin_ns - *main.run.clock_origin_ns) / 1000;
}

}  // namespace gpumem::report
