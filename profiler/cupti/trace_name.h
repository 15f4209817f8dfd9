// Where the CUPTI tracer writes: $GPUMEM_CUPTI_TRACE, else $GPUMEM_TRACE with ".cupti"
// before its ".gpumem" (the allocator's recorder may own $GPUMEM_TRACE itself), else
// gpumem-cupti-%p.gpumem. %p and %r are expanded later (profiler/trace_path.h).
#pragma once

#include <string>

namespace gpumem::cupti {

inline std::string CuptiTracePattern(const char* cupti_trace, const char* trace) {
  if (cupti_trace != nullptr && *cupti_trace != '\0') return cupti_trace;
  if (trace != nullptr && *trace != '\0') {
    std::string t = trace;
    const std::string ext = ".gpumem";
    if (t.size() > ext.size() && t.compare(t.size() - ext.size(), ext.size(), ext) == 0) {
      return t.substr(0, t.size() - ext.size()) + ".cupti" + ext;
    }
    return t + ".cupti.gpumem";
  }
  return "gpumem-cupti-%p.gpumem";
}

}  // namespace gpumem::cupti
