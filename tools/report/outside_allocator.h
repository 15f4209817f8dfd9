// Device memory outside the allocator on one device: what the CUPTI tracer saw other
// libraries take from the driver (by library: NCCL, cuBLAS, cuDNN, other, unknown), the
// allocator's own reserved bytes, pinned host memory apart, and the driver's own figure
// of memory in use (sampled at step ends) with the remainder none of them explain: the
// CUDA context and whatever CUPTI did not see. At the peak and at the end (or the OOM).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "profiler/process_note.h"
#include "tools/report/outside_library.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

// NVML's figures of the device's processes for a moment, and whether they were read then
// (at that step end, or at the OOM) or at an earlier step.
struct ProcessesAt {
  format::ProcessNote note;
  bool at_moment = false;
};

struct OutsideMoment {
  std::int64_t time_us = 0;
  std::optional<std::uint64_t> step;  // the step that ended here (the trace's number)
  std::uint64_t reserved = 0;         // the allocator's, on the device
  std::array<std::uint64_t, kOutsideLibraries> by_library{};  // live, indexed by OutsideLibrary
  std::uint64_t pinned_host = 0;
  std::optional<std::uint64_t> driver_total;
  std::optional<std::uint64_t> driver_used;  // total - free, where the driver said

  std::uint64_t outside() const;
  std::optional<ProcessesAt> processes;

  // driver_used - reserved - outside (never below 0): the CUDA context and unseen calls.
  std::optional<std::uint64_t> remainder() const;
  // Where NVML listed this process at this moment: its bytes less the allocator's and the
  // libraries' (never below 0): its CUDA context, loaded kernels and unseen calls.
  std::optional<std::uint64_t> context_and_unseen() const;
  // Where NVML listed this process at this moment: the driver's figure less this process's
  // and the other processes' (below 0 where NVML counts more than the driver).
  std::optional<std::int64_t> unnamed() const;
};

// What the libraries outside the allocator held, all together, after one of their changes.
struct HeldOutsideAt {
  std::int64_t time_us = 0;
  std::uint64_t bytes = 0;
};

struct OutsideAllocator {
  int device = 0;
  bool calls_recorded = false;        // the trace has the CUPTI tracer's records
  bool driver_sampled = false;        // step records carry the driver's free bytes
  std::optional<OutsideMoment> peak;  // the step end with the most driver memory in use
  std::optional<OutsideMoment> end;   // the last step end, the trace's end, or the OOM
  std::string end_is = "end";         // "end", "OOM" or "failed allocation"
  // What the libraries held after each of their changes, in time order on the main
  // trace's clock (empty without their records): the page's timeline draws it.
  std::vector<HeldOutsideAt> held_over_time;

  // Whether `m` says more than the allocator's own figure: libraries recorded, or the
  // driver's or NVML's figures read then.
  bool Measured(const OutsideMoment& m) const {
    return calls_recorded || m.driver_used || (m.processes && m.processes->at_moment);
  }
  // Step ends sampled, libraries recorded, or figures read where the run died before any
  // step ended.
  bool known() const { return calls_recorded || driver_sampled || (end && Measured(*end)); }
};

// Where the run ended, when it died of memory: the figures are taken there.
struct OutsideEnd {
  std::int32_t device = 0;
  std::int64_t time_us = 0;
  std::optional<std::uint64_t> driver_free;
  std::string what;  // "OOM", "failed allocation"
};

// `cupti`: the CUPTI tracer's trace of the same process (null: none); its times are lined
// up with `trace`'s by the headers' clock origins.
OutsideAllocator FindOutsideAllocator(const trace::Trace& trace, const trace::Trace* cupti,
                                      int device, const std::optional<OutsideEnd>& died);

}  // namespace gpumem::report
