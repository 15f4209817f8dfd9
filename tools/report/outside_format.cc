#include "tools/report/outside_format.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::report {
namespace {

using nlohmann::json;

template <typename T>
json OrNull(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

OutsideLibrary Library(std::size_t i) { return static_cast<OutsideLibrary>(i); }

json ProcessesToJson(const OutsideMoment& m) {
  if (!m.processes) return nullptr;
  const DeviceProcesses& p = m.processes->note.processes;
  json others = json::array();
  for (const ProcessBytes& o : p.others) others.push_back({{"pid", o.pid}, {"bytes", o.bytes}});
  return {{"step", m.processes->note.step},
          {"at_moment", m.processes->at_moment},
          {"self", OrNull(p.self)},
          {"others", std::move(others)},
          {"others_total", p.others_bytes()},
          {"context_and_unseen", OrNull(m.context_and_unseen())},
          {"unnamed", OrNull(m.unnamed())}};
}

json MomentToJson(const OutsideMoment& m, bool calls_recorded) {
  json j = {{"time_us", m.time_us},
            {"step", OrNull(m.step)},
            {"allocator_reserved", m.reserved},
            {"driver_total", OrNull(m.driver_total)},
            {"driver_used", OrNull(m.driver_used)},
            {"remainder", OrNull(m.remainder())},
            {"processes", ProcessesToJson(m)}};
  j["outside"] = nullptr;
  j["pinned_host"] = nullptr;
  if (!calls_recorded) return j;
  json by = json::object();
  for (std::size_t i = 0; i < kOutsideLibraries; ++i)
    by[OutsideLibraryKey(Library(i))] = m.by_library[i];
  by["total"] = m.outside();
  j["outside"] = std::move(by);
  j["pinned_host"] = m.pinned_host;
  return j;
}

// "NCCL 2.3 GiB, cuBLAS 64 MiB": the libraries that held something.
std::vector<std::string> LibraryParts(const OutsideMoment& m) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < kOutsideLibraries; ++i) {
    if (m.by_library[i] == 0) continue;
    parts.push_back(absl::StrCat(OutsideLibraryName(Library(i)), " ",
                                 Bytes(static_cast<double>(m.by_library[i]))));
  }
  return parts;
}

// What of the driver's figure is neither the allocator's nor the libraries': split by
// NVML's figures where they were read at this moment, else one remainder.
std::string DriverSplit(const OutsideAllocator& o, const OutsideMoment& m) {
  const std::optional<std::uint64_t> context = m.context_and_unseen();
  if (!context) {
    return absl::StrCat(Bytes(static_cast<double>(*m.remainder())),
                        o.calls_recorded
                            ? " CUDA context and calls CUPTI did not see"
                            : " outside the allocator (CUDA context, NCCL, cuBLAS, cuDNN)");
  }
  const DeviceProcesses& p = m.processes->note.processes;
  std::string out = absl::StrCat(
      "this process ", Bytes(static_cast<double>(*p.self)), " by NVML, of which ",
      Bytes(static_cast<double>(*context)),
      o.calls_recorded ? " its CUDA context, kernels and calls CUPTI did not see"
                       : " outside the allocator (CUDA context, kernels, NCCL, cuBLAS, cuDNN)");
  absl::StrAppend(&out, "; other processes ", Bytes(static_cast<double>(p.others_bytes())),
                  p.others.empty() ? "" : absl::StrCat(" (", ProcessesText(p.others), ")"));
  const std::int64_t unnamed = *m.unnamed();
  const double apart = std::abs(static_cast<double>(unnamed));
  const double used = static_cast<double>(std::max<std::uint64_t>(*m.driver_used, 1));
  absl::StrAppendFormat(&out, "; %s %s (%.1f%% of the driver's)",
                        unnamed < 0 ? "NVML counts more by" : "named by neither", Bytes(apart),
                        100.0 * apart / used);
  return out;
}

std::string MomentLine(const OutsideAllocator& o, const OutsideMoment& m, const std::string& at) {
  std::string line = absl::StrCat("  at ", at, m.step ? absl::StrCat(" (step ", *m.step, ")") : "",
                                  ": allocator reserved ", Bytes(static_cast<double>(m.reserved)));
  if (o.calls_recorded) {
    const std::vector<std::string> parts = LibraryParts(m);
    absl::StrAppend(&line, "; outside it ", parts.empty() ? "nothing" : absl::StrJoin(parts, ", "));
    if (m.pinned_host != 0) {
      absl::StrAppend(&line, "; pinned host memory ", Bytes(static_cast<double>(m.pinned_host)));
    }
  }
  if (m.driver_used) {
    absl::StrAppend(&line, "; the driver says ", Bytes(static_cast<double>(*m.driver_used)),
                    " in use of ", Bytes(static_cast<double>(*m.driver_total)), ": ",
                    DriverSplit(o, m));
  } else {
    absl::StrAppend(&line, "; driver's figure unknown");
  }
  return line + "\n";
}

}  // namespace

json OutsideToJson(const OutsideAllocator& o) {
  json j = {{"device", o.device},
            {"known", o.known()},
            {"calls_recorded", o.calls_recorded},
            {"driver_sampled", o.driver_sampled},
            {"end_is", o.end_is}};
  j["peak"] = o.peak ? MomentToJson(*o.peak, o.calls_recorded) : json(nullptr);
  j["end"] = o.end ? MomentToJson(*o.end, o.calls_recorded) : json(nullptr);
  if (o.peak) j["peak"]["measured"] = o.Measured(*o.peak);
  if (o.end) j["end"]["measured"] = o.Measured(*o.end);
  return j;
}

std::string FormatOutside(const OutsideAllocator& o) {
  std::string out = absl::StrCat("Memory outside the allocator (device ", o.device, "):\n");
  if (!o.known()) {
    return out +
           "  unknown: the trace has neither the CUPTI tracer's records nor the "
           "driver's readings (a trace recorded by gpumem run has them)\n";
  }
  if (o.peak && o.Measured(*o.peak)) absl::StrAppend(&out, MomentLine(o, *o.peak, "the peak"));
  if (o.end && o.Measured(*o.end)) {
    absl::StrAppend(&out, MomentLine(o, *o.end, o.end_is == "end" ? "the end" : "the " + o.end_is));
  }
  if (!o.calls_recorded) {
    absl::StrAppend(&out, "  (no CUPTI records: outside memory is not split by library)\n");
  } else if (o.peak &&
             o.peak->by_library[static_cast<std::size_t>(OutsideLibrary::kUnknown)] != 0) {
    absl::StrAppend(&out,
                    "  (unknown: recorded without native stacks; GPUMEM_STACKS=all names "
                    "the library)\n");
  }
  return out;
}

std::string OutsideVerdictPart(const OutsideAllocator& o) {
  if (!o.end) return "";
  const OutsideMoment& m = *o.end;
  // NVML's read at the moment alone (no driver figures, no calls recorded) still tells
  // this process's context apart.
  const std::uint64_t nvml_context = m.remainder() ? 0 : m.context_and_unseen().value_or(0);
  if (!o.calls_recorded && !m.driver_used && nvml_context == 0) return "";
  std::vector<std::string> parts = {
      absl::StrCat("the allocator held ", Bytes(static_cast<double>(m.reserved)))};
  if (o.calls_recorded) {
    for (std::string& p : LibraryParts(m)) parts.push_back(std::move(p));
  }
  const std::uint64_t others =
      m.processes && m.processes->at_moment ? m.processes->note.processes.others_bytes() : 0;
  if (m.remainder() && *m.remainder() > others) {
    parts.push_back(absl::StrCat(o.calls_recorded ? "context and unseen " : "outside it ",
                                 Bytes(static_cast<double>(*m.remainder() - others))));
  } else if (nvml_context > 0) {
    parts.push_back(absl::StrCat("context and unseen ", Bytes(static_cast<double>(nvml_context))));
  }
  if (others != 0) {
    parts.push_back(absl::StrCat("other processes ", Bytes(static_cast<double>(others))));
  }
  std::string out = absl::StrJoin(parts, ", ");
  if (m.driver_total) absl::StrAppend(&out, " of ", Bytes(static_cast<double>(*m.driver_total)));
  return out;
}

std::optional<std::uint64_t> OutsideAtPeak(const OutsideAllocator& o) {
  if (!o.peak) return std::nullopt;
  if (o.peak->driver_used) {
    return *o.peak->driver_used - std::min(*o.peak->driver_used, o.peak->reserved);
  }
  if (o.calls_recorded) return o.peak->outside();
  return std::nullopt;
}

}  // namespace gpumem::report
