// The CUPTI tracer's recorder options, from the environment: the recorder's own variables
// (RecorderOptions::FromEnvironment), its file (trace_name.h) and, under GPUMEM_TRACE_MAX,
// a ring of its own within CuptiTraceMax() (profiler/trace_max.h). Apart from the CUPTI
// plumbing so that it is tested on machines without a GPU.
#pragma once

#include "absl/status/statusor.h"
#include "profiler/recorder.h"

namespace gpumem::cupti {

// An error names the bad variable and its value: the tracer says it and does not trace.
absl::StatusOr<RecorderOptions> TracerOptionsFromEnvironment();

}  // namespace gpumem::cupti
