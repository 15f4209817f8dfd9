#include "tools/trace/plausible_sizes.h"

#include <algorithm>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpumem::trace {
namespace {

absl::Status Implausible(const Trace& t, absl::string_view where, std::uint64_t bytes,
                         absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      t.source, ": ", where, ": ", what, " (", bytes, " bytes); no device has more than 2^50 "
      "bytes: the file is damaged or not a real trace"));
}

std::string EventName(std::size_t index, const Event& e) {
  return absl::StrFormat("event %d (%s at 0x%x)", index, ActionName(e.action), e.addr);
}

bool HasSize(Action a) { return a != Action::kStep && a != Action::kAnnotate; }

absl::Status CheckEvents(const Trace& t) {
  std::uint64_t allocated = 0;  // every alloc's size, summed: each below 2^50, so no wrap
  std::uint64_t reserved = 0;
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const Event& e = t.events[i];
    if (!HasSize(e.action)) continue;
    if (e.size > kMaxDeviceBytes) return Implausible(t, EventName(i, e), e.size, "a size larger than any device");
    // An OOM's address is no block's (the tsv form keeps the driver's free bytes there).
    if (e.action != Action::kOom && e.addr > std::numeric_limits<std::uint64_t>::max() - e.size) {
      return Implausible(t, EventName(i, e), e.size, "a block that ends past the 64-bit address space");
    }
    if (e.action == Action::kOom && e.device_free > kMaxDeviceBytes) {
      return Implausible(t, EventName(i, e), e.device_free, "free device memory larger than any device");
    }
    std::uint64_t* total = e.action == Action::kAlloc ? &allocated
                           : e.action == Action::kSegmentAlloc || e.action == Action::kSegmentMap
                               ? &reserved
                               : nullptr;
    if (total == nullptr) continue;
    *total += e.size;
    if (*total > kMaxTotalBytes) {
      return Implausible(t, EventName(i, e), *total, "allocations that add up to more than 2^62 bytes");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSegments(const Trace& t) {
  for (std::size_t i = 0; i < t.segments.size(); ++i) {
    const Segment& s = t.segments[i];
    const std::string where = absl::StrFormat("segment %d at 0x%x", i, s.addr);
    if (s.total_size > kMaxDeviceBytes) return Implausible(t, where, s.total_size, "a segment larger than any device");
    if (s.addr > std::numeric_limits<std::uint64_t>::max() - s.total_size) {
      return Implausible(t, where, s.total_size, "a segment that ends past the 64-bit address space");
    }
    for (const SegmentBlock& b : s.blocks) {
      if (b.size > kMaxDeviceBytes || b.requested_size > kMaxDeviceBytes) {
        return Implausible(t, where, std::max(b.size, b.requested_size), "a block larger than any device");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPlausibleSizes(const Trace& trace) {
  if (trace.device_capacity && *trace.device_capacity > kMaxDeviceBytes) {
    return Implausible(trace, "the header", *trace.device_capacity, "a device capacity larger than any device");
  }
  if (absl::Status s = CheckEvents(trace); !s.ok()) return s;
  return CheckSegments(trace);
}

}  // namespace gpumem::trace
