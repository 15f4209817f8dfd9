#include "hooks/trace_hook.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "profiler/recorder.h"

namespace gpumem::hooks {
namespace {

// The process's recorder: opened once, never destroyed (allocations may still arrive
// from static destructors), closed at exit so the trace gets its end chunk.
Recorder* g_recorder = nullptr;

void CloseAtExit() {
  if (g_recorder == nullptr) return;
  if (absl::Status s = g_recorder->Close(); !s.ok()) {
    std::fprintf(stderr, "gpumem: closing the trace: %s\n", std::string(s.message()).c_str());
  }
}

}  // namespace

absl::StatusOr<AllocatorObserver*> StartTraceObserver(const Config& config) {
  if (config.trace_path.empty()) return nullptr;
  if (g_recorder != nullptr) return g_recorder;
  // GPUMEM_TRACE, GPUMEM_STACKS and GPUMEM_TRACE_FLUSH_MS are the recorder's own.
  absl::StatusOr<RecorderOptions> options = RecorderOptions::FromEnvironment();
  if (!options.ok()) return options.status();
  absl::StatusOr<std::unique_ptr<Recorder>> recorder = Recorder::Open(*std::move(options));
  if (!recorder.ok()) {
    return absl::Status(recorder.status().code(),
                        absl::StrCat("GPUMEM_TRACE='", config.trace_path,
                                     "': cannot record: ", recorder.status().message()));
  }
  g_recorder = recorder->release();
  static bool registered = (std::atexit(CloseAtExit), true);
  (void)registered;
  return g_recorder;
}

Recorder* TraceRecorder() { return g_recorder; }

void TraceStep(std::uint64_t) {
  if (g_recorder != nullptr) g_recorder->Step();
}

void FlushTraceForTesting() {
  if (g_recorder != nullptr) g_recorder->Flush();
}

}  // namespace gpumem::hooks
