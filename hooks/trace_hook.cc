#include "hooks/trace_hook.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "profiler/driver_memory.h"
#include "profiler/fork_advice.h"
#include "profiler/process_memory.h"
#include "profiler/process_note.h"
#include "profiler/recorder.h"
#include "profiler/trace_format.h"
#include "profiler/trace_path.h"

namespace gpumem::hooks {
namespace {

// The process's recorder: opened once, never destroyed (allocations may still arrive
// from static destructors), closed at exit so the trace gets its end chunk.
std::atomic<Recorder*> g_recorder{nullptr};
std::mutex g_open_mu;  // the allocator's start and profile mode may open it at once

// Steps and caps said before the trace opens (the file opens when the process first
// uses a device, so a process that never does writes nothing): kept, bounded, and
// written first when it opens, stamped with the opening time.
struct EarlyRecord {
  bool step;
  int device;
  std::uint64_t bytes;
  format::CapacitySource source;
};
constexpr std::size_t kMaxEarlyRecords = 4096;
std::vector<EarlyRecord> g_early;  // guarded by g_open_mu

// The recorder to write `record` to, or nullptr when it is kept until the trace opens.
Recorder* OpenOrKeep(const EarlyRecord& record) {
  if (Recorder* open = g_recorder.load(std::memory_order_acquire)) return open;
  std::lock_guard<std::mutex> lock(g_open_mu);
  if (Recorder* open = g_recorder.load()) return open;
  if (g_early.size() < kMaxEarlyRecords) g_early.push_back(record);
  return nullptr;
}

void WriteEarlyRecords(Recorder* recorder) {
  for (const EarlyRecord& r : g_early) {
    if (r.step) {
      recorder->Step();
    } else {
      recorder->RecordCapacity(r.device, r.bytes, r.source);
    }
  }
  g_early.clear();
  g_early.shrink_to_fit();
}

void CloseAtExit() {
  Recorder* recorder = g_recorder.load();
  if (recorder == nullptr) return;
  if (absl::Status s = recorder->Close(); !s.ok()) {
    std::fprintf(stderr, "gpumem: closing the trace: %s\n", std::string(s.message()).c_str());
  }
}

}  // namespace

namespace {
absl::StatusOr<Recorder*> OpenRecorder(const Config& config) {
  std::lock_guard<std::mutex> lock(g_open_mu);
  if (Recorder* open = g_recorder.load()) return open;
  // GPUMEM_TRACE, GPUMEM_STACKS and GPUMEM_TRACE_FLUSH_MS are the recorder's own.
  absl::StatusOr<RecorderOptions> options = RecorderOptions::FromEnvironment();
  if (!options.ok()) return options.status();
  options->measure_cost = config.verbose;
  options->leak_warn_steps = config.leak_warn_steps;
  options->trace_max_bytes = config.trace_max_bytes;
  const std::string path = options->path;
  absl::StatusOr<std::unique_ptr<Recorder>> recorder = Recorder::Open(*std::move(options));
  if (!recorder.ok()) {
    return absl::Status(recorder.status().code(),
                        absl::StrCat("GPUMEM_TRACE='", config.trace_path.empty() ? path
                                                                                 : config.trace_path,
                                     "': cannot record: ", recorder.status().message()));
  }
  Recorder* opened = recorder->release();
  WriteEarlyRecords(opened);
  g_recorder.store(opened);
  // Under torchrun each rank says where its trace went.
  if (opened->ring().bounded()) {
    std::fprintf(stderr, "gpumem: trace: %s (a ring within GPUMEM_TRACE_MAX: segments %s)\n",
                 opened->trace_path().c_str(),
                 format::RingSegmentName(opened->trace_path(), 0).c_str());
  } else {
    std::fprintf(stderr, "gpumem: trace: %s\n", opened->trace_path().c_str());
  }
  static bool registered = (std::atexit(CloseAtExit), true);
  (void)registered;
  return opened;
}
}  // namespace

absl::StatusOr<AllocatorObserver*> StartTraceObserver(const Config& config) {
  if (config.trace_path.empty()) return nullptr;
  absl::StatusOr<Recorder*> recorder = OpenRecorder(config);
  if (!recorder.ok()) return recorder.status();
  return *recorder;
}

absl::StatusOr<Recorder*> StartProfileRecorder(const Config& config) {
  return OpenRecorder(config);
}

Recorder* TraceRecorder() { return g_recorder.load(std::memory_order_acquire); }

void NoteCudaInForkedChild(const char* what) {
  static std::atomic<bool> noted{false};
  if (noted.exchange(true)) return;
  const std::string call = what != nullptr && *what != '\0' ? what : "?";
  std::fputs(ForkedChildCudaMessage(call, static_cast<long>(getpid())).c_str(), stderr);
  if (std::getenv("GPUMEM_TRACE") == nullptr) return;
  absl::StatusOr<RecorderOptions> options = RecorderOptions::FromEnvironment();
  if (!options.ok()) return;
  // The parent's trace belongs to the parent (its writer thread is not in this process):
  // the child gets a file of its own.
  const bool per_pid = options->path.find("%p") != std::string::npos;
  options->path = ExpandTracePath(options->path, TraceNameParts::OfThisProcess());
  if (!per_pid) options->path += ".child-" + std::to_string(getpid());
  options->writer.header["source"] = "gpumem (forked child)";
  absl::StatusOr<std::unique_ptr<Recorder>> recorder = Recorder::Open(*std::move(options));
  if (!recorder.ok()) return;
  (*recorder)->Annotate(-1, ForkedChildCudaAnnotation(call), true);
  if ((*recorder)->Close().ok()) {
    std::fprintf(stderr, "gpumem: recorded in %s\n", (*recorder)->writer().path().c_str());
  }
}

namespace {

// NVML's figures of the device's processes, as an annotation after the step record,
// where the driver's figure is the most the device has had (ProcessReadSchedule).
void NoteProcesses(Recorder* recorder, std::uint64_t step, const DriverMemory& driver) {
  static auto* schedule = new ProcessReadSchedule;  // never destroyed: steps may come at exit
  if (!schedule->Due(driver.device, driver.used())) return;
  if (std::optional<DeviceProcesses> processes = SampleProcessMemory(driver.device)) {
    recorder->Annotate(driver.device, format::ProcessNoteText({step, *std::move(processes)}));
  }
}

}  // namespace

void TraceStep(std::uint64_t) {
  // The driver's figures ride in the step record, where it can say them.
  Recorder* recorder = OpenOrKeep({true, 0, 0, {}});
  if (recorder == nullptr) return;
  const std::optional<DriverMemory> driver = SampleDriverMemory();
  const std::uint64_t step = recorder->Step(driver);
  if (driver) NoteProcesses(recorder, step, *driver);
}

void TraceCapacity(int device, std::uint64_t bytes, format::CapacitySource source) {
  if (Recorder* recorder = OpenOrKeep({false, device, bytes, source})) {
    recorder->RecordCapacity(device, bytes, source);
  }
}

void FlushTraceForTesting() {
  if (Recorder* recorder = TraceRecorder()) recorder->Flush();
}

}  // namespace gpumem::hooks
