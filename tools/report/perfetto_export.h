// `gpumem export --format perfetto`: the Chrome / Perfetto JSON trace format (opens in
// ui.perfetto.dev and chrome://tracing): a counter track of allocated and reserved bytes
// per device, and instants for step boundaries and OOMs.
#pragma once

#include <cstddef>

#include "nlohmann/json.hpp"
#include "tools/report/steps.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

// At most about `max_points` counter samples per device (the highest value of each
// stretch is kept, so peaks survive).
nlohmann::json ExportPerfetto(const trace::Trace& trace, const Steps& steps,
                              std::size_t max_points = 200000);

}  // namespace gpumem::report
