// `gpumem export --format pprof`, where this gpumem was built with Protobuf; elsewhere it
// says that it was not built.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tools/report/stack_profile.h"
#include "tools/trace/trace.h"

namespace gpumem::cli {

// OK where pprof export is built in (CMake found Protobuf); elsewhere an error that says
// it was not built and how to build it.
absl::Status PprofAvailable();

// The gzipped profile of `trace` at `at`; *moment says which moment it is, in words.
absl::StatusOr<std::string> PprofExport(const trace::Trace& trace, const report::ProfilePoint& at,
                                        std::string* moment);

}  // namespace gpumem::cli
