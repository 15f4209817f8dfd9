#include "allocator/sim_backend.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <optional>

#include "absl/strings/str_cat.h"

namespace gpumem {
namespace {
// Disjoint address areas, so a stray pointer from one kind is never taken for another.
constexpr DevicePtr kVaBase = DevicePtr{1} << 44;
constexpr DevicePtr kSegmentBase = DevicePtr{1} << 46;
}  // namespace

SimBackend::SimBackend(SimBackendOptions options)
    : options_(options),
      next_va_(kVaBase + options.address_offset),
      next_segment_(kSegmentBase + options.address_offset) {
  if (options_.granularity == 0 || (options_.granularity & (options_.granularity - 1))) {
    Misuse(absl::StrCat("granularity must be a power of two, got ", options_.granularity));
  }
}

SimBackend::~SimBackend() = default;

void SimBackend::Misuse(const std::string& what) const {
  // A policy bug, not a runtime condition: stop loudly so the test names it.
  std::fprintf(stderr, "SimBackend misuse: %s\n", what.c_str());
  std::abort();
}

absl::Status SimBackend::Charge(std::size_t bytes, const char* what) {
  if (counters_.physical_bytes + other_users_bytes_ + bytes > options_.capacity) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " of ", bytes, " bytes exceeds capacity: ", counters_.physical_bytes,
                     " (and ", other_users_bytes_, " of other users) of ", options_.capacity,
                     " in use"));
  }
  counters_.physical_bytes += bytes;
  if (counters_.physical_bytes > counters_.peak_physical_bytes) {
    counters_.peak_physical_bytes = counters_.physical_bytes;
  }
  return absl::OkStatus();
}

absl::StatusOr<DevicePtr> SimBackend::ReserveAddressRange(std::size_t bytes) {
  std::lock_guard lock(mu_);
  if (!options_.vmm) return absl::UnimplementedError("this device has no virtual memory management");
  if (bytes == 0 || bytes % options_.granularity) {
    Misuse(absl::StrCat("ReserveAddressRange of ", bytes, " bytes: not a multiple of granularity"));
  }
  // One granule of guard between ranges, so ranges are never accidentally contiguous.
  const std::size_t guarded = bytes + options_.granularity;
  DevicePtr base = next_va_;
  if (next_va_ + guarded > kSegmentBase) {
    // The fresh area is used up: reuse the first gap released ranges left, as a driver does.
    std::optional<DevicePtr> gap = FirstGap(guarded);
    if (!gap) return absl::ResourceExhaustedError("virtual address space exhausted");
    base = *gap;
  } else {
    next_va_ += guarded;
  }
  ranges_.emplace(base, bytes);
  counters_.reserved_va_bytes += bytes;
  return base;
}

// The lowest address with `bytes` unreserved from there, below the fresh area's end.
std::optional<DevicePtr> SimBackend::FirstGap(std::size_t bytes) const {
  DevicePtr at = kVaBase + options_.address_offset;
  for (const auto& [base, size] : ranges_) {
    if (base >= at + bytes) return at;
    at = std::max(at, base + size + options_.granularity);
  }
  if (at + bytes <= next_va_) return at;
  return std::nullopt;
}

void SimBackend::ReleaseAddressRange(DevicePtr base, std::size_t bytes) {
  std::lock_guard lock(mu_);
  auto it = ranges_.find(base);
  if (it == ranges_.end() || it->second != bytes) {
    Misuse(absl::StrCat("ReleaseAddressRange(", base, ", ", bytes, "): no such range"));
  }
  auto m = mappings_.lower_bound(base);
  if (m != mappings_.end() && m->first < base + bytes) {
    Misuse(absl::StrCat("ReleaseAddressRange(", base, "): range still has mappings"));
  }
  ranges_.erase(it);
  counters_.reserved_va_bytes -= bytes;
}

absl::StatusOr<PhysicalHandle> SimBackend::CreatePhysical(std::size_t bytes) {
  std::lock_guard lock(mu_);
  if (!options_.vmm) return absl::UnimplementedError("this device has no virtual memory management");
  if (bytes == 0 || bytes % options_.granularity) {
    Misuse(absl::StrCat("CreatePhysical of ", bytes, " bytes: not a multiple of granularity"));
  }
  if (absl::Status s = Charge(bytes, "CreatePhysical"); !s.ok()) return s;
  PhysicalHandle handle = next_handle_++;
  physical_.emplace(handle, bytes);
  ++counters_.physical_creates;
  return handle;
}

void SimBackend::ReleasePhysical(PhysicalHandle handle) {
  std::lock_guard lock(mu_);
  auto it = physical_.find(handle);
  if (it == physical_.end()) Misuse(absl::StrCat("ReleasePhysical(", handle, "): no such handle"));
  if (physical_map_count_[handle] != 0) {
    Misuse(absl::StrCat("ReleasePhysical(", handle, "): still mapped"));
  }
  counters_.physical_bytes -= it->second;
  physical_.erase(it);
  physical_map_count_.erase(handle);
  ++counters_.physical_releases;
}

bool SimBackend::InReservedRange(DevicePtr va, std::size_t bytes) const {
  auto it = ranges_.upper_bound(va);
  if (it == ranges_.begin()) return false;
  --it;
  return va >= it->first && va + bytes <= it->first + it->second;
}

absl::Status SimBackend::Map(DevicePtr va, std::size_t bytes, PhysicalHandle handle,
                             std::size_t offset) {
  std::lock_guard lock(mu_);
  const std::size_t g = options_.granularity;
  if (bytes == 0 || va % g || bytes % g || offset % g) {
    Misuse(absl::StrCat("Map(", va, ", ", bytes, ", offset ", offset, "): unaligned"));
  }
  if (!InReservedRange(va, bytes)) Misuse(absl::StrCat("Map(", va, "): outside any reserved range"));
  auto h = physical_.find(handle);
  if (h == physical_.end()) Misuse(absl::StrCat("Map: no physical handle ", handle));
  if (offset + bytes > h->second) Misuse("Map: past the end of the physical allocation");
  auto next = mappings_.lower_bound(va);
  if (next != mappings_.end() && next->first < va + bytes) Misuse(absl::StrCat("Map(", va, "): overlaps a mapping"));
  if (next != mappings_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.bytes > va) Misuse(absl::StrCat("Map(", va, "): overlaps a mapping"));
  }
  mappings_.emplace(va, Mapping{bytes, handle, offset});
  ++physical_map_count_[handle];
  counters_.mapped_bytes += bytes;
  ++counters_.maps;
  return absl::OkStatus();
}

absl::Status SimBackend::Unmap(DevicePtr va, std::size_t bytes) {
  std::lock_guard lock(mu_);
  // cuMemUnmap may cover several whole mappings but must not cut one.
  DevicePtr end = va + bytes;
  auto it = mappings_.find(va);
  if (it == mappings_.end()) Misuse(absl::StrCat("Unmap(", va, "): no mapping starts there"));
  while (it != mappings_.end() && it->first < end) {
    if (it->first + it->second.bytes > end) Misuse(absl::StrCat("Unmap(", va, ", ", bytes, "): cuts a mapping"));
    --physical_map_count_[it->second.handle];
    counters_.mapped_bytes -= it->second.bytes;
    DevicePtr covered = it->first + it->second.bytes;
    it = mappings_.erase(it);
    if (covered < end && (it == mappings_.end() || it->first != covered)) {
      Misuse(absl::StrCat("Unmap(", va, ", ", bytes, "): hole in the unmapped range"));
    }
  }
  ++counters_.unmaps;
  return absl::OkStatus();
}

absl::StatusOr<DevicePtr> SimBackend::AllocateSegment(std::size_t bytes) {
  std::lock_guard lock(mu_);
  if (bytes == 0) Misuse("AllocateSegment of 0 bytes");
  if (absl::Status s = Charge(bytes, "AllocateSegment"); !s.ok()) return s;
  DevicePtr base = next_segment_;
  // cudaMalloc returns 512-byte aligned pointers; keep segments apart by a page.
  next_segment_ += (bytes + options_.granularity + 511) / 512 * 512;
  segments_.emplace(base, bytes);
  counters_.segment_bytes += bytes;
  ++counters_.segment_allocs;
  return base;
}

void SimBackend::FreeSegment(DevicePtr ptr, std::size_t bytes) {
  std::lock_guard lock(mu_);
  auto it = segments_.find(ptr);
  if (it == segments_.end() || it->second != bytes) {
    Misuse(absl::StrCat("FreeSegment(", ptr, ", ", bytes, "): no such segment"));
  }
  segments_.erase(it);
  counters_.physical_bytes -= bytes;
  counters_.segment_bytes -= bytes;
  ++counters_.segment_frees;
}

EventHandle SimBackend::RecordEvent(StreamId stream) {
  std::lock_guard lock(mu_);
  EventHandle e = next_event_++;
  events_.emplace(e, Event{stream, ++recorded_[stream]});
  return e;
}

absl::Status SimBackend::StreamWaitEvent(StreamId waiter, EventHandle event) {
  std::lock_guard lock(mu_);
  auto it = events_.find(event);
  if (it == events_.end()) Misuse(absl::StrCat("StreamWaitEvent(", event, "): no such event"));
  ++counters_.stream_waits;
  waits_[waiter].push_back({recorded_[waiter], it->second.stream, it->second.sequence});
  return absl::OkStatus();
}

bool SimBackend::EventCompleted(EventHandle event) {
  std::lock_guard lock(mu_);
  auto it = events_.find(event);
  if (it == events_.end()) Misuse(absl::StrCat("EventCompleted(", event, "): no such event"));
  if (options_.events == SimBackendOptions::Events::kImmediate) return true;
  return completed_[it->second.stream] >= it->second.sequence;
}

void SimBackend::ReleaseEvent(EventHandle event) {
  std::lock_guard lock(mu_);
  if (events_.erase(event) == 0) Misuse(absl::StrCat("ReleaseEvent(", event, "): no such event"));
}

void SimBackend::Synchronize() {
  std::lock_guard lock(mu_);
  ++counters_.synchronizes;
  for (auto& [stream, n] : recorded_) completed_[stream] = n;
  waits_.clear();
}

void SimBackend::CompleteStream(StreamId stream) {
  std::lock_guard lock(mu_);
  CompleteLocked(stream, recorded_[stream], /*waits_too=*/true);
}

void SimBackend::CompleteStreamUpTo(StreamId stream, std::uint64_t events) {
  std::lock_guard lock(mu_);
  CompleteLocked(stream, std::min(events, recorded_[stream]), /*waits_too=*/false);
}

std::vector<std::pair<StreamId, std::uint64_t>> SimBackend::RecordedEvents() const {
  std::lock_guard lock(mu_);
  return {recorded_.begin(), recorded_.end()};
}

void SimBackend::CompleteLocked(StreamId stream, std::uint64_t sequence, bool waits_too) {
  std::vector<Wait> run;  // the waits this stream has now run past
  std::uint64_t& completed = completed_[stream];
  completed = std::max(completed, sequence);
  std::vector<Wait>& pending = waits_[stream];
  std::erase_if(pending, [&](const Wait& w) {
    if (!waits_too && w.after >= completed) return false;
    run.push_back(w);
    return true;
  });
  for (const Wait& w : run) CompleteLocked(w.stream, w.sequence, /*waits_too=*/false);
}

bool SimBackend::IsAccessible(DevicePtr ptr, std::size_t bytes) const {
  std::lock_guard lock(mu_);
  auto s = segments_.upper_bound(ptr);
  if (s != segments_.begin()) {
    --s;
    if (ptr >= s->first && ptr + bytes <= s->first + s->second) return true;
  }
  // Walk the mappings that cover [ptr, ptr+bytes) and require them to be contiguous.
  auto m = mappings_.upper_bound(ptr);
  if (m == mappings_.begin()) return false;
  --m;
  DevicePtr covered = ptr;
  const DevicePtr end = ptr + bytes;
  while (m != mappings_.end() && m->first <= covered) {
    covered = std::max(covered, m->first + m->second.bytes);
    if (covered >= end) return true;
    ++m;
  }
  return bytes == 0;
}

std::vector<SimBackend::Piece> SimBackend::Backing(DevicePtr ptr, std::size_t bytes) const {
  std::lock_guard lock(mu_);
  std::vector<Piece> pieces;
  const DevicePtr end = ptr + bytes;
  auto s = segments_.upper_bound(ptr);
  if (s != segments_.begin() && std::prev(s)->first + std::prev(s)->second > ptr) {
    pieces.push_back({0, ptr, bytes});
    return pieces;
  }
  auto m = mappings_.upper_bound(ptr);
  if (m != mappings_.begin()) --m;
  for (; m != mappings_.end() && m->first < end; ++m) {
    const DevicePtr lo = std::max(ptr, m->first);
    const DevicePtr hi = std::min(end, m->first + m->second.bytes);
    if (lo >= hi) continue;
    pieces.push_back({m->second.handle, m->second.offset + (lo - m->first), hi - lo});
  }
  return pieces;
}

std::size_t SimBackend::live_events() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

void SimBackend::set_capacity(std::uint64_t capacity) {
  std::lock_guard lock(mu_);
  options_.capacity = capacity;
}

void SimBackend::set_other_users_bytes(std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  other_users_bytes_ = bytes;
}

std::uint64_t SimBackend::DeviceFreeBytes() const {
  std::lock_guard lock(mu_);
  const std::uint64_t held = counters_.physical_bytes + other_users_bytes_;
  return options_.capacity > held ? options_.capacity - held : 0;
}

BackendCounters SimBackend::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

}  // namespace gpumem
