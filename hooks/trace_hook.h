// Where the profiler plugs into the C ABI: when GPUMEM_TRACE names a file, every device's
// allocator reports its events to the recorder returned here.
#pragma once

#include "absl/status/statusor.h"
#include "allocator/observer.h"
#include "hooks/config.h"
#include "profiler/trace_format.h"

namespace gpumem {
class Recorder;
}

namespace gpumem::hooks {

// The profiler's Recorder (profiler/recorder.h) when GPUMEM_TRACE names a file, nullptr
// when it is unset; an error when the trace cannot be recorded (then gpumem refuses to
// start rather than silently record nothing). One recorder per process.
absl::StatusOr<AllocatorObserver*> StartTraceObserver(const Config& config);
// Profile-only mode: the recorder, started on first call whatever GPUMEM_TRACE says (its
// default file name when unset). The same recorder StartTraceObserver returns.
absl::StatusOr<Recorder*> StartProfileRecorder(const Config& config);
// The recorder once started, else nullptr: the C ABI opens a Recorder::CallScope with it
// so allocations get the caller's Python stack (taken before the allocator's lock).
Recorder* TraceRecorder();
// CUDA is about to be used in a child forked from a process that had CUDA: says so, with
// the fix, on stderr and (with GPUMEM_TRACE set) in a trace of the child's own. Once.
void NoteCudaInForkedChild(const char* what);
// Tells the recorder a training step ended.
void TraceStep(std::uint64_t step);
// Tells the recorder `device`'s memory cap from now on (nothing without a recorder).
void TraceCapacity(int device, std::uint64_t bytes, format::CapacitySource source);
// Tests: everything recorded so far is in the file.
void FlushTraceForTesting();

}  // namespace gpumem::hooks
