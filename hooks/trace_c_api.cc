// The extern "C" functions of gpumem_trace.h: argument checks, then the recorder.
#include "hooks/gpumem_trace.h"
#include "hooks/trace_hook.h"
#include "profiler/recorder.h"
#include "profiler/trace_format.h"

extern "C" {

int gpumem_trace_step_source(int source) {
  if (source < 0 || source > static_cast<int>(gpumem::format::StepSource::kOptimizerHook)) {
    return -1;
  }
  gpumem::Recorder::SetStepSource(static_cast<gpumem::format::StepSource>(source));
  return 0;
}

int gpumem_trace_capacity(int device, uint64_t bytes, int source) {
  if (device < 0 || source < 1 || source > gpumem::format::kMaxCapacitySource) return -1;
  gpumem::hooks::TraceCapacity(device, bytes, static_cast<gpumem::format::CapacitySource>(source));
  return 0;
}

}  // extern "C"
