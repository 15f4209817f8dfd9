// The CUPTI tracer writes beside each gpumem trace NAME.gpumem a trace of its own,
// NAME.cupti.gpumem (profiler/cupti/trace_name.h): the device memory other libraries took
// from the driver. `gpumem report` reads it with its main trace. Under GPUMEM_TRACE_MAX
// both are rings: NAME.segK.gpumem and NAME.cupti.segK.gpumem, each name a link to its
// ring's newest segment.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tools/trace/trace.h"

namespace gpumem::report {

// NAME.cupti.gpumem for NAME.gpumem or one of its ring's segments NAME.segK.gpumem (and
// NAME.cupti.gpumem.xz for NAME.gpumem.xz: .gz and .zst too); empty for a CUPTI trace
// itself (or its ring's segment) or another name.
std::string CuptiCompanionPath(const std::string& path);

// `paths` less what is read through another of them (a glob run-*.gpumem takes it all):
// the CUPTI traces of main traces among them, the segments of rings whose name is among
// them, and all but the first segment of a ring named only by its segments (a segment
// reads its whole ring), so none reads as a rank of its own.
std::vector<std::string> MainTraces(const std::vector<std::string>& paths);

// The companion of `path` where the file exists and reads; a file that exists but does not
// read is a warning on stderr.
std::optional<trace::Trace> LoadCuptiCompanion(const std::string& path);

}  // namespace gpumem::report
