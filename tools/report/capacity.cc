#include "tools/report/capacity.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "allocator/emulation/pytorch_sizes.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::report {

std::optional<KnownCapacity> CapacityAt(const trace::Trace& trace, std::int32_t device,
                                        std::int64_t time_us,
                                        std::optional<std::uint64_t> given) {
  if (given) return KnownCapacity{*given, "--capacity"};
  const trace::CapacityChange* in_force = nullptr;
  for (const trace::CapacityChange& c : trace.capacity_changes) {
    if (c.time_us > time_us) break;
    if (c.device == device && c.bytes > 0) in_force = &c;
  }
  if (in_force) {
    return KnownCapacity{in_force->bytes,
                         absl::StrCat("trace: ", trace::CapacitySourceName(in_force->source))};
  }
  if (trace.device_capacity) return KnownCapacity{*trace.device_capacity, "trace header"};
  return std::nullopt;
}

std::optional<KnownCapacity> FinalCapacity(const trace::Trace& trace, std::int32_t device,
                                           std::optional<std::uint64_t> given) {
  return CapacityAt(trace, device, std::numeric_limits<std::int64_t>::max(), given);
}

namespace {

// Room past the segment PyTorch's allocator asks the driver for that no driver's own
// rounding or reserve explains.
constexpr std::uint64_t kClearlyFree = std::uint64_t{256} << 20;

}  // namespace

std::optional<KnownCapacity> CapFromOom(const OomPoint& p, const Timeline& timeline) {
  const std::uint64_t segment = emulation::AllocationSize(emulation::RoundSize(p.request));
  if (p.reserved == 0 || p.device_free < segment + kClearlyFree) return std::nullopt;
  const std::size_t d = static_cast<std::size_t>(p.device);
  const std::uint64_t held =
      std::max(p.reserved, d < timeline.devices.size() ? timeline.devices[d].reserved : 0);
  return KnownCapacity{
      held, absl::StrCat("at least the most the process held: its OOM came with ",
                         Bytes(p.device_free),
                         " still free on the device, so a cap of its own stopped it, such as "
                         "set_per_process_memory_fraction; --capacity gives the exact one"),
      /*lower_bound=*/true};
}

std::int32_t MainDevice(const trace::Trace& trace) {
  for (const trace::Event& e : trace.events) {
    if (e.action == trace::Action::kOom) return e.device;
  }
  for (const trace::Event& e : trace.events) {
    if (e.action == trace::Action::kAlloc) return e.device;
  }
  return 0;
}

}  // namespace gpumem::report
