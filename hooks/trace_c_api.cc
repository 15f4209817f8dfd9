// The extern "C" functions of gpumem_trace.h: argument checks, then the recorder.
#include "hooks/gpumem_trace.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "hooks/trace_hook.h"
#include "profiler/graph_pool_note.h"
#include "profiler/recorder.h"
#include "profiler/trace_format.h"
#include "profiler/trace_path.h"

namespace {

// Why a trace could not be recorded as the environment says, or "".
std::string TraceSetupError() {
  absl::StatusOr<gpumem::RecorderOptions> options = gpumem::RecorderOptions::FromEnvironment();
  if (!options.ok()) return std::string(options.status().message());
  const std::string path =
      gpumem::ExpandTracePath(options->path, gpumem::TraceNameParts::OfThisProcess());
  const std::size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (::access(folder.c_str(), W_OK | X_OK) == 0) return "";
  return "GPUMEM_TRACE='" + path + "': cannot record: folder " + folder +
         " does not exist or is not writable";
}

}  // namespace

extern "C" {

size_t gpumem_trace_check(char* buf, size_t len) {
  const std::string error = TraceSetupError();
  if (buf != nullptr && len > 0) std::snprintf(buf, len, "%s", error.c_str());
  return error.size() + 1;
}

int gpumem_trace_step_source(int source) {
  if (source < 0 || source > static_cast<int>(gpumem::format::kLastStepSource)) {
    return -1;
  }
  gpumem::Recorder::SetStepSource(static_cast<gpumem::format::StepSource>(source));
  return 0;
}

void gpumem_trace_steps_coming(void) {
  if (gpumem::Recorder* recorder = gpumem::hooks::TraceRecorder()) recorder->StepsComing();
}

int gpumem_trace_loop_thread(void) {
  gpumem::Recorder::MarkLoopThread();
  gpumem::Recorder* recorder = gpumem::hooks::TraceRecorder();
  if (recorder == nullptr) return 0;
  recorder->NoteLoopThread();
  return 1;
}

int gpumem_trace_capacity(int device, uint64_t bytes, int source) {
  if (device < 0 || source < 1 || source > gpumem::format::kMaxCapacitySource) return -1;
  gpumem::hooks::TraceCapacity(device, bytes, static_cast<gpumem::format::CapacitySource>(source));
  return 0;
}

int gpumem_trace_note(int device, const char* text) {
  if (text == nullptr || *text == '\0') return -1;
  if (gpumem::Recorder* recorder = gpumem::hooks::TraceRecorder()) {
    recorder->Annotate(device, text, true);
    recorder->Flush();  // the process is about to end
  }
  return 0;
}

int gpumem_trace_graph_pool(int device, int change, uint64_t pool_a, uint64_t pool_b) {
  using gpumem::format::GraphPoolChange;
  if (device < 0 || change < static_cast<int>(GraphPoolChange::kCaptureBegins) ||
      change > static_cast<int>(GraphPoolChange::kReleased)) {
    return -1;
  }
  if (gpumem::Recorder* recorder = gpumem::hooks::TraceRecorder()) {
    recorder->GraphPool(device, {{pool_a, pool_b}, static_cast<GraphPoolChange>(change)});
  }
  return 0;
}

}  // extern "C"
