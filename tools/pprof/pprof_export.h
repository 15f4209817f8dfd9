// `gpumem export --format pprof`: live memory by stack at one moment, and what each stack
// allocated up to it (report::StackProfile), as pprof's profile.proto, gzipped. Opens in
// `go tool pprof`, speedscope and Pyroscope. Sample types, in the order of Go's heap
// profiles: alloc_objects/count, alloc_space/bytes, inuse_objects/count and
// inuse_space/bytes (the default). Each trace frame (Python or native: function, file,
// line) is one location; samples list them leaf first and carry a label "device"
// ("cuda:N").
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "pprof_proto/profile.pb.h"
#include "tools/report/stack_profile.h"
#include "tools/trace/trace.h"

namespace gpumem::pprof {

perftools::profiles::Profile BuildProfile(const trace::Trace& trace,
                                          const report::StackProfile& profile);

// The profile serialized and gzipped, as pprof files are stored.
absl::StatusOr<std::string> ExportPprof(const trace::Trace& trace,
                                        const report::StackProfile& profile);

}  // namespace gpumem::pprof
