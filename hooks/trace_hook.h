// Where the profiler plugs into the C ABI: when GPUMEM_TRACE names a file, every device's
// allocator reports its events to the recorder returned here.
#pragma once

#include "absl/status/statusor.h"
#include "allocator/observer.h"
#include "hooks/config.h"

namespace gpumem::hooks {

// nullptr when no trace was asked for; an error when one was asked for and cannot be
// recorded (then gpumem refuses to start rather than silently record nothing).
absl::StatusOr<AllocatorObserver*> StartTraceObserver(const Config& config);
// Tells the recorder a training step ended.
void TraceStep(std::uint64_t step);

}  // namespace gpumem::hooks
