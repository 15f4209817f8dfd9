// Early warnings of memory outside the allocator that grows: at each step mark, what each
// of this process's libraries holds (the CUPTI tracer's count, sampled into a SiteHistory
// under LibraryKey) is judged by the allocator's own warning rule (LeakWarner). A library
// whose memory rose at each of the last steps is said once on stderr, with the step at
// which the device would have no free memory left, and withdrawn once it stops: NCCL's
// communicators piling up a step at a time would otherwise be silent until the OOM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "profiler/driver_memory.h"
#include "profiler/leak_warning.h"
#include "profiler/site_history.h"
#include "tools/report/library_kind.h"

namespace gpumem::hooks {

// A library's key in the SiteHistory of what libraries hold: one per device and library.
std::uint64_t LibraryKey(int device, report::OutsideLibrary library);

class LibraryWarnings {
 public:
  // 0 turns the warnings off (GPUMEM_LEAK_WARN_STEPS).
  explicit LibraryWarnings(std::size_t steps) : warner_(steps), steps_(steps) {}

  // The lines to print at step end `step`: `driver`, the current device's figures where the
  // driver gave them (the projection); `site_of`, the user's line a library's memory on a
  // device is mostly for.
  std::string Check(std::uint64_t step, const SiteHistory& history,
                    const std::optional<DriverMemory>& driver,
                    absl::FunctionRef<std::string(int, report::OutsideLibrary)> site_of);

 private:
  LeakWarner warner_;
  std::size_t steps_;
};

}  // namespace gpumem::hooks
