#include "hooks/oom_verdict_hook.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "hooks/trace_hook.h"
#include "hooks/library_warnings.h"
#include "hooks/tracer_libraries.h"
#include "profiler/driver_memory.h"
#include "profiler/library_holdings.h"
#include "profiler/live_view.h"
#include "profiler/oom_verdict.h"
#include "profiler/process_note.h"
#include "profiler/recorder.h"

namespace gpumem::hooks {
namespace {

// Reserved memory no live block uses and that the failed request could have used: what
// private pools hold is theirs alone, so it is no sign of fragmentation.
std::uint64_t UsableCached(std::uint64_t reserved, std::uint64_t allocated,
                           std::uint64_t private_pools_free) {
  const std::uint64_t unused = reserved - std::min(reserved, allocated);
  return unused - std::min(unused, private_pools_free);
}

std::mutex g_mu;
SiteHistory g_totals;  // device totals at step ends, under kPinnedLow keys
// What each of this process's own libraries outside the allocator held at step ends
// (TracerLibraryDevices), under LibraryKey.
SiteHistory g_libraries;

using report::OutsideLibrary;
constexpr OutsideLibrary kWatchedLibraries[] = {OutsideLibrary::kNccl, OutsideLibrary::kCublas,
                                                OutsideLibrary::kCudnn, OutsideLibrary::kOther};

// The early warnings of what they held growing (GPUMEM_LEAK_WARN_STEPS).
LibraryWarnings& Warnings() {
  static LibraryWarnings warnings([] {
    const absl::StatusOr<Config>& config = ProcessConfig();
    return config.ok() ? config->leak_warn_steps : Config().leak_warn_steps;
  }());
  return warnings;
}
std::uint64_t g_steps = 0;

// One full verdict per device, step and class: a program that catches OOMs (cuDNN's
// workspace tries, batch-size finders) would otherwise print it at every attempt.
struct Said {
  std::uint64_t step = ~std::uint64_t{0};
  report::OomClass cls = report::OomClass::kPeak;
  std::uint64_t repeats = 0;  // further OOMs of that step and class
};

// Further OOMs of one step are counted, and said at the 1st, 2nd, 4th, 8th...: a step
// of cuDNN workspace tries fails dozens of times and survives.
bool PowerOfTwo(std::uint64_t n) { return n != 0 && (n & (n - 1)) == 0; }
absl::flat_hash_map<int, Said> g_said;

bool LogOom() {
  const absl::StatusOr<Config>& config = ProcessConfig();
  return !config.ok() || config->log_oom;
}

// The growth and sites: from the recorder when a trace is open, else the step totals.
void Describe(OomVerdictInput& in) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (Recorder* recorder = TraceRecorder()) {
    recorder->DescribeOom(in.device, &in);
  } else {
    in.figures.finished_steps = g_steps;
    DescribeTotalGrowth(g_totals, in.device, in.figures.allocated, &in);
    if (Recorder::StepSourceNow() == format::StepSource::kModelCallAwaitingBackward) {
      CountAsFirstIteration(g_steps + 1, &in);
    }
  }
}

// NVML's figures of the device's processes, read once a step: a step of cuDNN workspace
// tries or a batch-size finder makes dozens of OOMs. A fresh read goes into the trace too,
// for the report's OOM line.
struct ProcessesRead {
  std::uint64_t step = 0;
  std::optional<DeviceProcesses> processes;
};
std::map<int, ProcessesRead> g_processes;  // by device

std::optional<DeviceProcesses> ProcessesThisStep(int device) {
  Recorder* recorder = TraceRecorder();
  std::lock_guard<std::mutex> lock(g_mu);
  const std::uint64_t step = recorder != nullptr ? recorder->steps() : g_steps;
  auto [it, first] = g_processes.try_emplace(device);
  if (!first && it->second.step == step) return it->second.processes;
  it->second.step = step;
  it->second.processes = SampleProcessMemory(device);
  if (it->second.processes && recorder != nullptr) {
    recorder->Annotate(device, format::ProcessNoteText({step, *it->second.processes}));
  }
  return it->second.processes;
}

// What one library holds on the device now (the CUPTI tracer's count) and how that grew
// over the step ends; nullopt where the tracer is not loaded.
std::optional<LibraryHolding> ReadHolding(int device, OutsideLibrary library) {
  const std::optional<TracerLibraryHolding> now = ReadTracerLibraries(device, library);
  if (!now) return std::nullopt;
  LibraryHolding h;
  h.library = library;
  h.bytes = now->bytes;
  h.site = now->site;
  std::lock_guard<std::mutex> lock(g_mu);
  const double min_growth = report::MinLeakGrowth(now->bytes);
  if (const auto g = g_libraries.GrowthOf(LibraryKey(device, library), min_growth)) {
    h.growth = g->growth;
    h.growth_steps = g->step_ends;
  }
  return h;
}

// What this process's own unusual libraries hold on the device, or, where some library's
// memory outside the allocator grew step by step (NCCL's with a communicator made each
// step), the fastest-growing one's. Returns what of it counts as held outside: the
// unusual libraries', and a growing library's.
std::uint64_t AddLibraryHoldings(OomVerdictInput& in) {
  std::uint64_t unusual = 0;
  for (const OutsideLibrary library : kWatchedLibraries) {
    const std::optional<LibraryHolding> h = ReadHolding(in.device, library);
    if (!h) return 0;  // no tracer
    if (!in.library_bytes) in.library_bytes.emplace();
    (*in.library_bytes)[static_cast<std::size_t>(library)] = h->bytes;
    if (h->bytes == 0) continue;
    if (library == OutsideLibrary::kOther) unusual = h->bytes;
    const bool faster = h->growth && (!in.libraries.growth || h->growth->bytes_per_step >
                                                                  in.libraries.growth->bytes_per_step);
    if (faster || (library == OutsideLibrary::kOther && !in.libraries.growth)) in.libraries = *h;
  }
  const bool other_grows = in.libraries.growth && in.libraries.library != OutsideLibrary::kOther;
  return unusual + (other_grows ? in.libraries.bytes : 0);
}

// The driver's count of the device's memory, NVML's of its processes, and the tracer's of
// this process's unusual libraries, where they can say (never initializes CUDA). Others'
// memory and those libraries' are what the dying process can tell apart from the rest of
// its own; the report splits all of it by library.
void AddOutsideFigures(OomVerdictInput& in) {
  const std::optional<DriverMemory> d = SampleDriverMemory();
  if (d && d->device == in.device) {
    if (!in.driver_free) in.driver_free = d->free;
    in.driver_total = d->total;
    in.processes = ProcessesThisStep(in.device);
  }
  const std::uint64_t libraries = AddLibraryHoldings(in);
  in.figures.device_free = in.driver_free;
  in.figures.held_outside = (in.processes ? in.processes->others_bytes() : 0) + libraries;
}

// `headline`: printed before a full verdict only (the allocator's one-line OOM report).
void Print(const OomVerdictInput& in, report::OomClass cls, const std::string& headline = "") {
  if (!LogOom()) return;
  std::string text;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    Said& said = g_said[in.device];
    if (said.step == in.figures.finished_steps && said.cls == cls) {
      if (PowerOfTwo(++said.repeats)) {
        text = "gpumem: device " + std::to_string(in.device) + ": " +
               std::to_string(said.repeats + 1) +
               " out-of-memory errors in this step so far, same verdict: " + report::OomVerdictName(cls) +
               " (a program that catches them, as cuDNN's workspace tries do, goes on)\n";
      }
    } else {
      said = Said{in.figures.finished_steps, cls};
      text = headline + OomVerdictText(in, cls);
    }
  }
  std::fputs(text.c_str(), stderr);
}

}  // namespace

void ExplainAllocatorOom(DeviceState& s, const OomReport& report, const std::string& headline) {
  OomVerdictInput in;
  in.device = s.device;
  in.gpumem_allocator = true;
  in.page_bytes = s.page_bytes;
  in.figures.request = report.requested_bytes;
  in.figures.allocated = report.allocated_bytes;
  in.figures.capacity = report.capacity_bytes;
  in.figures.headroom = report.headroom_bytes;
  in.figures.largest_free = report.largest_free_bytes;
  in.private_pools_free = report.other_pools_free_bytes;
  in.figures.free_cached = UsableCached(report.reserved_bytes, report.allocated_bytes,
                                        in.private_pools_free);
  in.reserved = report.reserved_bytes;
  AddOutsideFigures(in);
  Describe(in);
  Print(in, ClassifyDyingOom(in), headline.empty() ? headline : headline + "\n");
}

report::OomClass ExplainOom(int device, const gpumem_oom_figures_t& f) {
  OomVerdictInput in;
  in.device = device;
  in.figures.request = f.requested_bytes;
  in.figures.allocated = f.allocated_bytes;
  in.figures.capacity = f.capacity_bytes;
  std::uint64_t reserved = f.reserved_bytes;
  if (f.largest_free_bytes != 0) in.figures.largest_free = f.largest_free_bytes;
  if (f.driver_free_bytes != 0) in.driver_free = f.driver_free_bytes;
  if (DeviceState* s = StartedDevice(device)) {  // gpumem's allocator: its own figures
    const AllocatorStats a = s->allocator->stats();
    in.gpumem_allocator = true;
    in.page_bytes = s->page_bytes;
    if (in.figures.allocated == 0) in.figures.allocated = a.allocated_bytes;
    if (reserved == 0) reserved = a.reserved_bytes;
    if (in.figures.capacity == 0) in.figures.capacity = s->capacity;
    if (!in.figures.largest_free) in.figures.largest_free = a.largest_free_bytes;
    in.private_pools_free = a.private_pools_free_bytes;
  }
  AddOutsideFigures(in);  // before Describe, which flushes the trace
  Describe(in);  // fills allocated and the cap from the trace where still unknown
  in.figures.free_cached = UsableCached(reserved, in.figures.allocated, in.private_pools_free);
  if (reserved != 0) in.reserved = reserved;
  if (in.figures.capacity == 0) {
    in.figures.capacity = reserved + f.driver_free_bytes;
    in.figures.capacity_known = false;
  }
  const report::OomClass cls = ClassifyDyingOom(in);
  Print(in, cls);
  return cls;
}

std::string OutsideLeakVerdict(int device) {
  OomVerdictInput in;
  in.device = device;
  AddLibraryHoldings(in);
  return OutsideLeakLines(in.libraries);
}

namespace {
// What each library held on each device that any ever held on, by LibraryKey.
absl::flat_hash_map<std::uint64_t, std::uint64_t> LibraryTotals() {
  absl::flat_hash_map<std::uint64_t, std::uint64_t> libraries;
  const std::uint64_t devices = TracerLibraryDevices();
  for (int device = 0; device < LibraryHoldings::kMaxDevices; ++device) {
    if ((devices >> device & 1) == 0) continue;
    for (const OutsideLibrary library : kWatchedLibraries) {
      libraries[LibraryKey(device, library)] = TracerLibraryBytes(device, library);
    }
  }
  return libraries;
}
}  // namespace

void SampleStepTotals(std::uint64_t step) {
  absl::flat_hash_map<std::uint64_t, std::uint64_t> live;
  std::vector<std::uint64_t> pinned;
  ForEachStartedDevice([&](DeviceState& s) {
    live[DeviceTotalKey(s.device)] = s.allocator->stats().allocated_bytes;
    pinned.push_back(DeviceTotalKey(s.device));
  });
  const absl::flat_hash_map<std::uint64_t, std::uint64_t> libraries = LibraryTotals();
  std::string warnings;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    g_steps = step;
    g_totals.Add(step, live, pinned);
    if (libraries.empty()) return;
    g_libraries.Add(step, libraries, {});
    warnings = Warnings().Check(step, g_libraries, SampleDriverMemory(),
                                [](int device, OutsideLibrary library) {
                                  const auto h = ReadTracerLibraries(device, library);
                                  return h ? h->site : std::string();
                                });
  }
  std::fputs(warnings.c_str(), stderr);
}

}  // namespace gpumem::hooks
