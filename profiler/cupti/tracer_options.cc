#include "profiler/cupti/tracer_options.h"

#include <cstdlib>

#include "profiler/cupti/trace_name.h"
#include "profiler/trace_max.h"

namespace gpumem::cupti {

absl::StatusOr<RecorderOptions> TracerOptionsFromEnvironment() {
  absl::StatusOr<RecorderOptions> options = RecorderOptions::FromEnvironment();
  if (!options.ok()) return options.status();
  absl::StatusOr<std::uint64_t> trace_max = ParseTraceMax(std::getenv(kTraceMaxVariable));
  if (!trace_max.ok()) return trace_max.status();
  options->trace_max_bytes = CuptiTraceMax(*trace_max);
  options->path =
      CuptiTracePattern(std::getenv("GPUMEM_CUPTI_TRACE"), std::getenv("GPUMEM_TRACE"));
  options->writer.header["source"] = "cupti";
  return options;
}

}  // namespace gpumem::cupti
