// The in-memory form of an allocation trace, whatever file it came from: a PyTorch
// memory snapshot pickle, its flattened .tsv.gz form, or a gpumem trace. Replay, reports
// and exports read only this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace gpumem::trace {

enum class Action : std::uint8_t {
  kAlloc,          // a block handed to the program
  kFreeRequested,  // the program returned it (may still be in use by queued work)
  kFreeCompleted,  // its memory is reusable
  kSegmentAlloc,   // device memory obtained (cudaMalloc / pages mapped)
  kSegmentFree,    // device memory returned
  kSegmentMap,     // expandable segments / VMM: pages mapped
  kSegmentUnmap,
  kOom,            // an allocation failed; `size` is the request, `device_free` the driver's free
  kSnapshot,
  kStep,           // a training-step boundary (gpumem traces, or recovered from annotations)
  kAnnotate,       // user annotations (record_function ranges and the like)
};

const char* ActionName(Action action);

// What marked a step (gpumem traces record it; other formats leave it unknown).
enum class StepSource : std::uint8_t {
  kUnknown = 0,
  kExplicit = 1,       // the program called gpumem.step()
  kOptimizerHook = 2,  // PyTorch's optimizer step hooks, set by the Python package
  kBackward = 3,       // backward passes, where no optimizer steps or it stalls (the package)
  kModelCall = 4,      // the model's calls, where neither of those marks (the package)
  kGraphReplay = 5,    // CUDA graph replays, where none of those marks (the package)
  // Model calls with grad in train mode before any backward pass: parts of the first
  // iteration, perhaps, rather than steps (the package)
  kModelCallAwaitingBackward = 6,
};
// How many StepSource values there are: the last one's value plus one.
inline constexpr std::size_t kStepSources =
    static_cast<std::size_t>(StepSource::kModelCallAwaitingBackward) + 1;
std::optional<Action> ParseAction(absl::string_view name);

struct Frame {
  std::string filename;
  std::int32_t line = 0;
  std::string function;
};

// A fixed-size record: 10M of them fit well inside the report's memory budget.
struct Event {
  Action action = Action::kAlloc;
  StepSource step_source = StepSource::kUnknown;  // kStep only (fits the padding)
  std::int32_t device = 0;
  std::uint32_t stack_id = 0;  // index into Trace::stacks; 0 is the empty stack
  std::uint32_t thread = 0;
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::int64_t time_us = 0;
  std::uint64_t device_free = 0;  // kOom only
  // kStep of gpumem traces: addr = the driver's free bytes on `device` at this step end,
  // stream = its total bytes (0 = unknown; docs/trace-format.md).
};

// A block or free piece of a segment, from a snapshot's end state.
struct SegmentBlock {
  std::uint64_t addr = 0;
  std::uint64_t size = 0;
  std::uint64_t requested_size = 0;
  bool allocated = false;  // active_allocated vs inactive / active_pending_free
  std::uint32_t stack_id = 0;
};

struct Segment {
  std::int32_t device = 0;
  std::uint64_t addr = 0;
  std::uint64_t total_size = 0;
  std::uint64_t stream = 0;
  bool is_large_pool = true;
  bool is_expandable = false;
  std::vector<SegmentBlock> blocks;
};

// A named time range (PyTorch's external_annotations / record_function).
struct Annotation {
  std::string name;
  bool start = true;
  std::int64_t time_us = 0;
  std::int32_t device = 0;
};

// Where a device's memory cap came from.
enum class CapacitySource : std::uint8_t {
  kUnknown = 0,
  kDeviceTotal = 1,     // the device's total memory: no cap set
  kEnvironment = 2,     // GPUMEM_CAPACITY
  kMemoryFraction = 3,  // torch.cuda.set_per_process_memory_fraction
  kSetCapacity = 4,     // gpumem.set_capacity / gpumem_set_capacity
};
const char* CapacitySourceName(CapacitySource source);

// The cap in force on `device` from `time_us` on (gpumem traces, record type 14).
struct CapacityChange {
  std::int64_t time_us = 0;
  std::int32_t device = 0;
  std::uint64_t bytes = 0;
  CapacitySource source = CapacitySource::kUnknown;
};

// A device-memory call outside the allocator that failed (gpumem traces, record type 15):
// cuBLAS, cuDNN or NCCL asking the driver for memory it did not have.
struct FailedAllocation {
  std::int64_t time_us = 0;
  std::int32_t device = 0;
  std::uint64_t size = 0;
  std::string call;            // "cuMemAlloc", "cudaMalloc", ...; "unknown"
  bool runtime = false;        // error is a cudaError_t, else a CUresult
  std::uint32_t error = 0;
  std::optional<std::uint64_t> device_free;  // the driver's free bytes, where known
  std::uint32_t stack_id = 0;
};
// "CUDA_ERROR_OUT_OF_MEMORY", "cudaErrorMemoryAllocation", ...; "error N" for others.
std::string FailedCallErrorName(const FailedAllocation& f);

// Which process of a job recorded the trace, where the file says (gpumem trace headers:
// torchrun's or Slurm's variables; docs/trace-format.md).
struct RunInfo {
  std::optional<std::int64_t> rank;
  std::optional<std::int64_t> local_rank;
  std::optional<std::int64_t> world_size;
  std::optional<std::int64_t> pid;  // the recording process's
  std::string host;
  // CLOCK_MONOTONIC at the file's opening: lines a process's two traces (gpumem's and
  // the CUPTI tracer's) up in time.
  std::optional<std::int64_t> clock_origin_ns;
};

// What a gpumem trace that did not finish (a killed run, a file cut short by a full disk or
// an interrupted copy, a damaged one) kept and lost; docs/trace-format.md states the bound.
struct TraceLoss {
  std::uint64_t events_kept = 0;    // events read back (chunks and raw journal)
  std::int64_t last_event_us = 0;   // the latest kept event's time_us (0: none)
  std::uint64_t file_bytes = 0;
  std::uint64_t bytes_kept = 0;     // in chunks that read back, file prefix included
  std::uint64_t bytes_lost = 0;     // written but unreadable: a cut chunk, damaged stretches
  std::uint64_t data_end = 0;       // offset where the readable data stops
  std::string summary;              // one line: events kept, bytes lost, where and why
};

// A ring trace (GPUMEM_TRACE_MAX) read as one: the segments kept and what came before them
// (docs/trace-format.md, Ring traces).
struct RingWindow {
  std::uint64_t first_segment = 0;  // the oldest kept
  std::uint64_t last_segment = 0;
  std::uint64_t max_bytes = 0;
  bool dropped = false;             // segments before first_segment were deleted
  std::int64_t start_us = 0;        // the first kept event
  // Blocks live at start_us, allocated before it: the oldest segment's checkpoint, the
  // trace's first events (at start_us, with their stacks).
  std::uint64_t checkpoint_blocks = 0;
  std::uint64_t checkpoint_bytes = 0;
  std::optional<std::uint64_t> first_step;  // the first step record kept: its number
  std::string summary;                      // one line, also the first of the warnings
};

struct Trace {
  std::string source;  // the file it came from
  RunInfo run;
  std::string format;  // "pytorch-snapshot", "tsv", "gpumem"
  std::vector<Event> events;
  std::vector<Frame> frames;                      // interned
  std::vector<std::vector<std::uint32_t>> stacks; // stack id -> frame ids, innermost first;
                                                  // stacks[0] is empty
  std::vector<Segment> segments;                  // state at the end, where the file has it
  std::vector<Annotation> annotations;
  std::optional<std::uint64_t> device_capacity;   // where the file records it
  std::vector<CapacityChange> capacity_changes;   // in time order
  std::vector<FailedAllocation> failed_allocations;  // in time order
  bool expandable_segments = false;               // the recording allocator's setting
  std::vector<std::string> warnings;              // recoverable oddities found while reading
  std::optional<TraceLoss> loss;                  // set when the recording did not finish
  std::optional<RingWindow> ring;                 // set for a ring trace

  Trace() : stacks(1) {}
};

}  // namespace gpumem::trace
