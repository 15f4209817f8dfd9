#include "hooks/trace_hook.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "profiler/fork_advice.h"
#include "profiler/recorder.h"
#include "profiler/trace_path.h"

namespace gpumem::hooks {
namespace {

// The process's recorder: opened once, never destroyed (allocations may still arrive
// from static destructors), closed at exit so the trace gets its end chunk.
std::atomic<Recorder*> g_recorder{nullptr};
std::mutex g_open_mu;  // the allocator's start and profile mode may open it at once

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
  const std::string path = options->path;
  absl::StatusOr<std::unique_ptr<Recorder>> recorder = Recorder::Open(*std::move(options));
  if (!recorder.ok()) {
    return absl::Status(recorder.status().code(),
                        absl::StrCat("GPUMEM_TRACE='", config.trace_path.empty() ? path
                                                                                 : config.trace_path,
                                     "': cannot record: ", recorder.status().message()));
  }
  Recorder* opened = recorder->release();
  g_recorder.store(opened);
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
  options->path = ExpandTracePath(options->path, getpid(), RankFromEnvironment());
  if (!per_pid) options->path += ".child-" + std::to_string(getpid());
  options->writer.header["source"] = "gpumem (forked child)";
  absl::StatusOr<std::unique_ptr<Recorder>> recorder = Recorder::Open(*std::move(options));
  if (!recorder.ok()) return;
  (*recorder)->Annotate(-1, ForkedChildCudaAnnotation(call), true);
  if ((*recorder)->Close().ok()) {
    std::fprintf(stderr, "gpumem: recorded in %s\n", (*recorder)->writer().path().c_str());
  }
}

void TraceStep(std::uint64_t) {
  if (Recorder* recorder = TraceRecorder()) recorder->Step();
}

void TraceCapacity(int device, std::uint64_t bytes, format::CapacitySource source) {
  if (Recorder* recorder = TraceRecorder()) recorder->RecordCapacity(device, bytes, source);
}

void FlushTraceForTesting() {
  if (Recorder* recorder = TraceRecorder()) recorder->Flush();
}

}  // namespace gpumem::hooks
