// The recorder: gpumem's allocator reports every alloc, free, map, unmap and OOM to it
// (as an AllocatorObserver, attached by the C ABI in hooks/), and it appends each with
// time, device, stream, thread, size, address and an interned stack id to the trace.
// Step() marks a training-step boundary. See docs/profiler.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "allocator/observer.h"
#include "profiler/driver_memory.h"
#include "profiler/graph_pool_note.h"
#include "profiler/autograd_sites.h"
#include "profiler/live_view.h"
#include "profiler/trace_ring.h"
#include "profiler/trace_writer.h"

namespace gpumem {

// GPUMEM_STACKS: which frames each event carries.
enum class StackMode { kNone, kPython, kNative, kAll };
absl::StatusOr<StackMode> ParseStackMode(absl::string_view text);
const char* StackModeName(StackMode mode);

struct RecorderOptions {
  // (What every event reads comes first: with the recorder's first members, one line.)
  StackMode stacks = StackMode::kPython;
  // Time the recorder's own work on the allocating threads (stack capture with the GIL,
  // appending records) and print it when the trace closes (GPUMEM_VERBOSE=1): the share
  // of a run that recording costs, measured where it is paid. Two clock reads per call.
  bool measure_cost = false;
  std::size_t max_native_frames = 48;
  std::size_t max_python_frames = 64;
  // File name; %p is the pid, %r the rank, %l the local rank, %h the host
  // (profiler/trace_path.h). FromEnvironment's default: DefaultTracePattern().
  std::string path = "gpumem-%p.gpumem";
  TraceWriterOptions writer;  // its path is set from `path`
  // GPUMEM_TRACE_MAX: the trace is a ring of segments that never holds much more than this
  // on disk (profiler/trace_ring.h; read by hooks/config.h); 0: one unbounded file.
  std::uint64_t trace_max_bytes = 0;
  // A site whose live memory rose at this many step ends in a row gets a stderr warning
  // (GPUMEM_LEAK_WARN_STEPS, read by hooks/config.h); 0: none.
  std::size_t leak_warn_steps = 5;
  // Live bytes by site (the OOM verdict's sites, the leak warning). Off only to measure
  // what it costs (bench/recorder_bench.cc).
  bool live_view = true;

  // GPUMEM_TRACE (path), GPUMEM_STACKS (none|python|native|all), GPUMEM_TRACE_FLUSH_MS,
  // GPUMEM_TRACE_SYNC_MS.
  // Errors name the variable and its value.
  static absl::StatusOr<RecorderOptions> FromEnvironment();
};

class alignas(64) Recorder final : public AllocatorObserver {
 public:
  static absl::StatusOr<std::unique_ptr<Recorder>> Open(RecorderOptions options);

  // The hot path: called by the allocator on the allocating thread.
  void OnEvent(const AllocatorEvent& event) override;
  bool RecordsAllocations() const override { return !paused(); }

  // A training-step boundary; returns the number of the step that begins. Its record
  // names the step source last set (what marks the steps: gpumem.step() or the Python
  // package's optimizer step hooks), if any.
  // `driver`: the driver's figures at this step end (docs/trace-format.md: the step record's
  // address is the free bytes, its stream the total, its device the device).
  std::uint64_t Step(const std::optional<DriverMemory>& driver = std::nullopt);
  // Steps will be marked, but not yet (LiveView::StepsComing): noted in the trace once
  // (format::kStepsComingNote).
  void StepsComing();
  // The calling thread runs the training loop (the Python package saw it call a model,
  // run a backward pass or step an optimizer): from now on its allocations are the
  // loop's, not a helper's (report::HelperKept). Static, as it may be said before the
  // recorder opens; NoteLoopThread writes the thread's note in the trace (once).
  static void MarkLoopThread();
  void NoteLoopThread();
  // Process-wide: it may be said before the recorder opens (the allocator opens it with
  // the first device).
  static void SetStepSource(format::StepSource source) {
    step_source_.store(static_cast<std::uint8_t>(source), std::memory_order_relaxed);
  }
  static format::StepSource StepSourceNow() {
    return static_cast<format::StepSource>(step_source_.load(std::memory_order_relaxed));
  }
  // The memory cap of `device` from now on, and where it came from (record type 14).
  void RecordCapacity(std::int32_t device, std::uint64_t bytes, format::CapacitySource source);

  // Paused: allocations are not recorded and no stack is taken (frees, maps and steps
  // still are, so a report sees frees of blocks it never saw allocated, which it skips).
  // For measuring the recording's cost in one process (tests/gpu/overhead_inprocess.py).
  void SetPaused(bool paused) { paused_.store(paused, std::memory_order_relaxed); }
  bool paused() const { return paused_.load(std::memory_order_relaxed); }

  // Records one event of any type with the calling thread's stack (in the configured
  // mode), `api_frame` (a named frame id, e.g. "cudaMalloc") innermost if non-zero, and
  // `skip` more of the caller's own native frames left out. `with_native`: native frames
  // too where the mode has Python frames only (not where it is none), for the rare
  // events whose native caller names something (the library behind a driver call).
  void RecordEvent(format::RecordType type, std::int32_t device, std::uint64_t addr,
                   std::uint64_t size, std::uint64_t stream, std::uint32_t api_frame = 0,
                   std::optional<std::uint64_t> extra = std::nullopt, std::size_t skip = 0,
                   bool with_native = false);

  // The calling thread's stack id in the configured mode (0 for none). With
  // `may_take_gil`, a Python thread that released the GIL takes it back to read its
  // frames: never pass it while holding a lock that a GIL holder may wait for.
  // `with_native` as for RecordEvent.
  std::uint32_t CaptureStack(std::uint32_t api_frame, std::size_t skip,
                             bool may_take_gil = true, bool with_native = false);

  // Stack `stack`'s frames, innermost first, named (native ones symbolized now).
  std::vector<StackTable::NamedFrame> StackFrames(std::uint32_t stack) const;
  // The site a stack's frames name, as the report names it: its innermost frame outside
  // library code.
  static std::string SiteOf(const std::vector<StackTable::NamedFrame>& frames);
  // The same where the stack has a frame outside library code; empty where it has none (a
  // library's own thread, such as NCCL's proxy).
  static std::string UserSiteOf(const std::vector<StackTable::NamedFrame>& frames);

  // Captures the calling thread's stack before the allocator takes its lock, for the
  // events this thread reports until the scope ends: under the allocator's lock the GIL
  // cannot be taken (a thread holding the GIL may be waiting for that lock), and PyTorch
  // calls the allocator with the GIL released. A null recorder does nothing.
  class CallScope {
   public:
    explicit CallScope(Recorder* recorder);
    ~CallScope();
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

   private:
    bool active_ = false;
  };

  // The early warnings of passes found since the last call (loops nothing marks), to
  // stderr. Called where no allocator lock is held: before an allocation takes it.
  void PrintPassWarnings();

  // Records an event whose stack the caller captured earlier (CaptureStack): profile-only
  // mode, where PyTorch's allocator reports its events under its own lock.
  void RecordWithStack(format::RecordType type, std::int32_t device, std::uint64_t addr,
                       std::uint64_t size, std::uint64_t stream, std::uint32_t stack_id,
                       std::optional<std::uint64_t> extra = std::nullopt);

  // PyTorch autograd link for the next allocation this thread records (set by
  // libgpumem_torch.so just before the allocation; docs/trace-format.md, type 12): the
  // forward op's sequence number, or the running backward node's, and the forward
  // thread's PyTorch id. `node_frame` is 0 on forward threads, else AutogradNodeFrame().
  static void SetAutogradLink(std::uint64_t seq, std::uint32_t thread,
                              std::uint32_t node_frame);
  // The frame id naming a backward node ("MmBackward0"); intern once per node type.
  // kPythonNodeName names a Python-defined Function's node, whose backward runs Python.
  std::uint32_t AutogradNodeFrame(const std::string& name);
  static constexpr const char* kPythonNodeName = "PyNode";

  // What the recorder knows of an OOM on `device` (its sites, their growth, the steps
  // finished, the cap), filled into `in`; the trace is flushed, OOM record included.
  void DescribeOom(std::int32_t device, OomVerdictInput* in);
  std::uint64_t steps() const { return step_.load(std::memory_order_relaxed); }

  void Annotate(std::int32_t device, const std::string& name, bool start = true);
  // A CUDA graph pool's capture or release (profiler/graph_pool_note.h): its note, and the
  // live view counts the pool's memory with the code that made it.
  void GraphPool(std::int32_t device, const format::GraphPoolNote& note);
  void Flush() { writer().Flush(); }
  // Ends the trace; with measure_cost, prints CostSummary() to stderr first.
  absl::Status Close();

  // What recording has cost the allocating threads so far (measure_cost only):
  // "recording cost: ... stack captures ..., ... records ..." with counts, totals and means.
  std::string CostSummary() const;

  // The file being written: a ring's current segment.
  TraceWriter& writer() { return *writer_.load(std::memory_order_acquire); }
  // What readers open: the trace's name (a ring's link to its newest segment).
  const std::string& trace_path() const { return ring_->path(); }
  const TraceRing& ring() const { return *ring_; }
  StackMode stack_mode() const { return options_.stacks; }

 private:
  Recorder(RecorderOptions options, std::unique_ptr<TraceRing> ring);

  // measure_cost's counters, summed over threads (relaxed: read at close).
  struct Cost {
    std::atomic<std::uint64_t> captures{0}, capture_ns{0}, gil_taken{0}, no_python{0},
        without_gil{0};
    std::atomic<std::uint64_t> records{0}, record_ns{0};
  };

  // Into the current segment, or the next one if it closed meanwhile.
  void Write(const RawRecord& r);
  // Whether this thread's pending autograd link is a C++ backward node (no Python frames).
  bool RunningCppBackwardNode() const;

  // paused_, writer_ and options_' first fields share a line: every event reads them.
  // writer_: the ring's current segment, moved by the ring's thread.
  std::atomic<bool> paused_{false};
  std::atomic<bool> steps_coming_noted_{false};
  std::atomic<TraceWriter*> writer_;
  const RecorderOptions options_;
  std::atomic<std::uint32_t> python_node_frame_{0};
  // The last failed request's device (high half) and stack, until a verdict takes it: the
  // verdict names the library that made it, where one keeps what it asked for
  // (report::Keeper).
  std::atomic<std::uint64_t> last_oom_stack_{0};
  void NoteOomStack(std::int32_t device, std::uint32_t stack);
  std::atomic<std::uint64_t> step_{0};
  static inline std::atomic<std::uint8_t> step_source_{0};
  Cost cost_;
  const std::int64_t opened_ns_;
  // Live bytes by site and by step, for the early leak warning and the OOM verdict.
  std::unique_ptr<LiveView> live_;
  // With live_: backward allocations filed under their forward op's stack.
  std::unique_ptr<AutogradSites> autograd_sites_;
  std::unique_ptr<TraceRing> ring_;  // owns the writers
};

}  // namespace gpumem
