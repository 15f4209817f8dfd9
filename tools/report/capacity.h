// The memory cap a device ran under: --capacity when given, else what the trace recorded
// (the cap in force at that moment: device total, GPUMEM_CAPACITY,
// set_per_process_memory_fraction), else the trace header's device_capacity, else what
// an OOM tells of it (CapFromOom).
#pragma once

#include <cstdint>
#include <optional>

#include "tools/report/oom_explain.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

// The cap on `device` at `time_us`.
std::optional<KnownCapacity> CapacityAt(const trace::Trace& trace, std::int32_t device,
                                        std::int64_t time_us,
                                        std::optional<std::uint64_t> given);

// The cap on `device` at the trace's end.
std::optional<KnownCapacity> FinalCapacity(const trace::Trace& trace, std::int32_t device,
                                           std::optional<std::uint64_t> given);

// A cap no record holds, told by a PyTorch OOM: where the driver still had clearly more
// free than the segment the request needed, PyTorch stopped at a cap of the process's own (set_per_process_memory_
// fraction, which its snapshots do not record). It is at least the most the process held
// on that device, and that lower bound is what is taken: a leak is then called only where
// it explains the OOM under any cap the trace allows.
std::optional<KnownCapacity> CapFromOom(const OomPoint& p, const Timeline& timeline);

// The device the diagnosis is about: the first OOM's, else the first allocation's.
std::int32_t MainDevice(const trace::Trace& trace);

}  // namespace gpumem::report
