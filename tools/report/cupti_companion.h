// The CUPTI tracer writes beside each gpumem trace NAME.gpumem a trace of its own,
// NAME.cupti.gpumem (profiler/cupti/trace_name.h): the device memory other libraries took
// from the driver. `gpumem report` reads it with its main trace.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tools/trace/trace.h"

namespace gpumem::report {

// NAME.cupti.gpumem for NAME.gpumem; empty for a CUPTI trace itself or another name.
std::string CuptiCompanionPath(const std::string& path);

// `paths` less the CUPTI traces whose main trace is among them (a glob run-*.gpumem takes
// both): they are read with it, not as ranks of their own.
std::vector<std::string> WithoutCompanions(const std::vector<std::string>& paths);

// The companion of `path` where the file exists and reads; a file that exists but does not
// read is a warning on stderr.
std::optional<trace::Trace> LoadCuptiCompanion(const std::string& path);

}  // namespace gpumem::report
