#include "profiler/recorder.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "profiler/driver_memory.h"
#include "profiler/package_notes.h"
#include "profiler/native_stack.h"
#include "profiler/python_stack.h"
#include "profiler/trace_path.h"
#include "tools/report/call_returns.h"
#include "tools/report/library_keepers.h"
#include "tools/report/verdict_rules.h"

namespace gpumem {

absl::StatusOr<StackMode> ParseStackMode(absl::string_view text) {
  if (text == "none") return StackMode::kNone;
  if (text == "python") return StackMode::kPython;
  if (text == "native") return StackMode::kNative;
  if (text == "all") return StackMode::kAll;
  return absl::InvalidArgumentError(
      absl::StrCat("GPUMEM_STACKS='", text, "': expected none, python, native or all"));
}

const char* StackModeName(StackMode mode) {
  switch (mode) {
    case StackMode::kNone: return "none";
    case StackMode::kPython: return "python";
    case StackMode::kNative: return "native";
    case StackMode::kAll: return "all";
  }
  return "?";
}

absl::StatusOr<RecorderOptions> RecorderOptions::FromEnvironment() {
  RecorderOptions options;
  options.path = DefaultTracePattern();
  if (const char* v = std::getenv("GPUMEM_TRACE"); v != nullptr && *v != '\0') {
    options.path = v;
  }
  if (const char* v = std::getenv("GPUMEM_STACKS"); v != nullptr && *v != '\0') {
    absl::StatusOr<StackMode> mode = ParseStackMode(v);
    if (!mode.ok()) return mode.status();
    options.stacks = *mode;
  }
  if (const char* v = std::getenv("GPUMEM_TRACE_FLUSH_MS"); v != nullptr && *v != '\0') {
    int ms;
    if (!absl::SimpleAtoi(v, &ms) || ms <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPUMEM_TRACE_FLUSH_MS='", v, "': expected a positive integer"));
    }
    options.writer.flush_interval_ms = ms;
  }
  if (const char* v = std::getenv("GPUMEM_TRACE_SYNC_MS"); v != nullptr && *v != '\0') {
    int ms;
    if (!absl::SimpleAtoi(v, &ms) || ms < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GPUMEM_TRACE_SYNC_MS='", v, "': expected a non-negative integer (0: never)"));
    }
    options.writer.sync_interval_ms = ms;
  }
  return options;
}

absl::StatusOr<std::unique_ptr<Recorder>> Recorder::Open(RecorderOptions options) {
  options.writer.path = ExpandTracePath(options.path, TraceNameParts::OfThisProcess());
  options.writer.header["stacks"] = StackModeName(options.stacks);
  TraceRingOptions ring{options.writer, options.trace_max_bytes};
  absl::StatusOr<std::unique_ptr<TraceRing>> opened = TraceRing::Open(std::move(ring));
  if (!opened.ok()) return opened.status();
  return std::unique_ptr<Recorder>(new Recorder(std::move(options), std::move(*opened)));
}

namespace {
std::string FrameLabel(const StackTable::NamedFrame& f) {
  return absl::StrCat(f.filename, ":", f.line, " ", f.function);
}

// A stack's innermost frame outside library code, or null where it has none.
const StackTable::NamedFrame* UserFrame(const std::vector<StackTable::NamedFrame>& frames) {
  for (const StackTable::NamedFrame& f : frames) {
    if (!report::IsLibraryFile(f.filename)) return &f;
  }
  return nullptr;
}

// A stack's site as the report names it: its innermost frame outside library code (its
// innermost frame where all of it is library code).
std::string SiteName(const std::vector<StackTable::NamedFrame>& frames) {
  if (frames.empty()) return "<unknown stack>";
  const StackTable::NamedFrame* user = UserFrame(frames);
  return FrameLabel(user != nullptr ? *user : frames.front());
}

// A stack's user frames, outermost first, for report::CallReturns.
std::vector<report::UserFrame> UserPath(const std::vector<StackTable::NamedFrame>& frames,
                                        report::UserFrameIds& ids) {
  std::vector<report::UserFrame> path;
  for (auto f = frames.rbegin(); f != frames.rend(); ++f) {
    if (!report::IsLibraryFile(f->filename)) path.push_back(ids.Of(f->filename, f->line, f->function));
  }
  return path;
}

bool SiteCallReturned(const StackTable& stacks, std::uint32_t kept,
                      const std::vector<std::uint32_t>& later) {
  report::UserFrameIds ids;
  report::CallReturns returns;
  for (std::uint32_t stack : later) returns.Add(UserPath(stacks.Frames(stack), ids), 1);
  return returns.Returned(UserPath(stacks.Frames(kept), ids), 0);
}

std::string CallApartName(const std::vector<StackTable::NamedFrame>& kept,
                          const std::vector<StackTable::NamedFrame>& other) {
  const std::optional<std::size_t> at = report::CallApart(
      kept, other,
      [](const StackTable::NamedFrame& f) { return report::IsLibraryFile(f.filename); },
      [](const StackTable::NamedFrame& a, const StackTable::NamedFrame& b) {
        return a.line == b.line && a.filename == b.filename && a.function == b.function;
      });
  if (!at || (other.empty() && report::CallerTellsNothing(kept[*at].function))) return "";
  return FrameLabel(kept[*at]);
}
}  // namespace

std::vector<StackTable::NamedFrame> Recorder::StackFrames(std::uint32_t stack) const {
  return ring_->stacks().Frames(stack);
}

std::string Recorder::SiteOf(const std::vector<StackTable::NamedFrame>& frames) {
  return SiteName(frames);
}

std::string Recorder::UserSiteOf(const std::vector<StackTable::NamedFrame>& frames) {
  const StackTable::NamedFrame* user = UserFrame(frames);
  return user != nullptr ? FrameLabel(*user) : std::string();
}

Recorder::Recorder(RecorderOptions options, std::unique_ptr<TraceRing> ring)
    : writer_(ring->current()),
      options_(std::move(options)),
      opened_ns_(TraceWriter::NowNs()),
      live_(options_.live_view ? std::make_unique<LiveView>(
                                     options_.leak_warn_steps,
                                     [this](std::uint32_t stack) {
                                       return SiteName(ring_->stacks().Frames(stack));
                                     },
                                     [this](std::uint32_t kept, std::uint32_t other) {
                                       return CallApartName(ring_->stacks().Frames(kept),
                                                            ring_->stacks().Frames(other));
                                     },
                                     [this](std::uint32_t kept,
                                            const std::vector<std::uint32_t>& later) {
                                       return SiteCallReturned(ring_->stacks(), kept, later);
                                     },
                                     [this](std::uint32_t stack) {
                                       return report::KeeperInside(ring_->stacks().Frames(stack));
                                     })
                               : nullptr),
      ring_(std::move(ring)) {
  if (live_ != nullptr) autograd_sites_ = std::make_unique<AutogradSites>();
  // A ring's next segment takes the records from the moment it opens.
  ring_->Start([this](TraceWriter* w) { writer_.store(w, std::memory_order_release); });
}

void Recorder::Write(const RawRecord& r) {
  TraceWriter* w = writer_.load(std::memory_order_acquire);
  // A ring's segment closed between the load and the record: the next one takes it.
  while (!w->Record(r)) {
    TraceWriter* next = writer_.load(std::memory_order_acquire);
    if (next == w) return;  // the trace is closed
    w = next;
  }
}

absl::Status Recorder::Close() {
  PrintPassWarnings();  // the last passes' warnings wait for an allocation that never came
  if (options_.measure_cost) std::fprintf(stderr, "gpumem: %s\n", CostSummary().c_str());
  return ring_->Close();
}

std::string Recorder::CostSummary() const {
  const auto get = [](const std::atomic<std::uint64_t>& v) {
    return v.load(std::memory_order_relaxed);
  };
  const auto mean_ns = [](std::uint64_t total, std::uint64_t n) {
    return n == 0 ? 0.0 : static_cast<double>(total) / static_cast<double>(n);
  };
  const std::uint64_t captures = get(cost_.captures), records = get(cost_.records);
  const std::uint64_t capture_ns = get(cost_.capture_ns), record_ns = get(cost_.record_ns);
  const double wall_s = static_cast<double>(TraceWriter::NowNs() - opened_ns_) * 1e-9;
  return absl::StrFormat(
      "recording cost on the allocating threads over %.1f s: %d stack captures, %.3f s "
      "(%.0f ns each; %d read without the GIL, %d took the GIL back, %d found no Python "
      "frame); %d records, %.3f s (%.0f ns each); together %.2f%% of the wall time",
      wall_s, captures, static_cast<double>(capture_ns) * 1e-9, mean_ns(capture_ns, captures),
      get(cost_.without_gil), get(cost_.gil_taken), get(cost_.no_python), records,
      static_cast<double>(record_ns) * 1e-9, mean_ns(record_ns, records),
      wall_s > 0 ? 100.0 * static_cast<double>(capture_ns + record_ns) * 1e-9 / wall_s : 0.0);
}

namespace {
// measure_cost: adds one call and its duration to a pair of counters when it ends.
class CostTimer {
 public:
  CostTimer(bool measure, std::atomic<std::uint64_t>& calls, std::atomic<std::uint64_t>& ns)
      : start_(measure ? TraceWriter::NowNs() : 0), calls_(calls), ns_(ns) {}
  ~CostTimer() {
    if (start_ == 0) return;
    calls_.fetch_add(1, std::memory_order_relaxed);
    ns_.fetch_add(TraceWriter::NowNs() - start_, std::memory_order_relaxed);
  }
  CostTimer(const CostTimer&) = delete;
  CostTimer& operator=(const CostTimer&) = delete;

 private:
  const std::int64_t start_;
  std::atomic<std::uint64_t>& calls_;
  std::atomic<std::uint64_t>& ns_;
};

void NamePythonCode(const RawFrame& frame, FrameDef* def) {
  PythonStacks::Get().Name(frame, def);
}
}  // namespace

// Frames of the recorder itself to leave out of native stacks: CaptureStack and its
// caller (RecordEvent or OnEvent). Both are kept out of line so the count holds.
constexpr std::size_t kOwnFrames = 2;

namespace {
// The stack captured by this thread's innermost CallScope, for its OnEvent calls.
struct CallStack {
  const Recorder* recorder = nullptr;
  std::uint32_t stack_id = 0;
};
thread_local CallStack t_call_stack;

// The autograd link SetAutogradLink left for this thread's next allocation.
struct AutogradLink {
  std::uint64_t seq = 0;
  std::uint32_t thread = 0;
  std::uint32_t node_frame = 0;
  bool set = false;
};
thread_local AutogradLink t_autograd;
// This thread has run a backward node (autograd's engine runs them on threads of its own).
thread_local bool t_runs_backward = false;
// This thread runs the training loop (Recorder::MarkLoopThread), and its note was written.
thread_local bool t_runs_loop = false;
thread_local bool t_loop_noted = false;

// Who is allocating, for the live view's helper-thread evidence.
ThreadRole RoleOfThisThread() {
  thread_local const bool main = TraceWriter::ThreadId() == static_cast<std::uint32_t>(getpid());
  if (main || t_runs_loop) return ThreadRole::kMain;
  return t_runs_backward ? ThreadRole::kBackward : ThreadRole::kHelper;
}

// No std::optional on this path: one passed by value is spilled to the stack (its flag as
// a byte store) and read back as 16 bytes, a store the processor cannot forward (two
// thirds of OnEvent's samples in a traced alloc/free loop on the VM).
RawRecord MakeRecord(format::RecordType type, std::int32_t device, std::uint64_t addr,
                     std::uint64_t size, std::uint64_t stream, std::uint32_t stack_id) {
  RawRecord r;
  r.stack_id = stack_id;
  r.time_ns = TraceWriter::NowNs();
  r.type = type;
  r.device = device;
  r.addr = addr;
  r.size = size;
  r.stream = stream;
  r.thread = TraceWriter::ThreadId();
  return r;
}

// What the driver has free on `device`, where its context is current (an allocator's OOM
// is on its device's): the report tells a full device from a full cap by it.
std::optional<std::uint64_t> DriverFreeOn(std::int32_t device) {
  const std::optional<DriverMemory> d = SampleDriverMemory();
  if (!d || d->device != device) return std::nullopt;
  return d->free;
}

void SetExtra(RawRecord* r, std::optional<std::uint64_t> extra) {
  r->has_extra = extra.has_value();
  r->extra = extra.value_or(0);
}

// Moves this thread's pending autograd link, if any, into an allocation's record.
void TakeAutogradLink(RawRecord* r) {
  if (!t_autograd.set || r->type != format::RecordType::kAlloc) return;
  r->has_autograd = true;
  r->autograd_seq = t_autograd.seq;
  r->autograd_thread = t_autograd.thread;
  r->autograd_node_frame = t_autograd.node_frame;
  t_autograd.set = false;
}
}  // namespace

void Recorder::SetAutogradLink(std::uint64_t seq, std::uint32_t thread,
                               std::uint32_t node_frame) {
  t_autograd = AutogradLink{seq, thread, node_frame, true};
  if (node_frame != 0) t_runs_backward = true;
}

std::uint32_t Recorder::AutogradNodeFrame(const std::string& name) {
  const std::uint32_t frame =
      ring_->stacks().InternNamedFrame(format::FrameKind::kApi, name, "<autograd>", 0);
  if (name == kPythonNodeName) python_node_frame_.store(frame, std::memory_order_relaxed);
  return frame;
}

bool Recorder::RunningCppBackwardNode() const {
  return t_autograd.set && t_autograd.node_frame != 0 &&
         t_autograd.node_frame != python_node_frame_.load(std::memory_order_relaxed);
}

void Recorder::RecordWithStack(format::RecordType type, std::int32_t device,
                               std::uint64_t addr, std::uint64_t size, std::uint64_t stream,
                               std::uint32_t stack_id, std::optional<std::uint64_t> extra) {
  RawRecord r = MakeRecord(type, device, addr, size, stream, stack_id);
  SetExtra(&r, extra);
  TakeAutogradLink(&r);
  Write(r);
  if (type == format::RecordType::kOom) NoteOomStack(device, stack_id);
  if (live_ == nullptr) return;
  if (type == format::RecordType::kAlloc) {
    live_->OnAlloc(device, addr, size, autograd_sites_->LiveStack(r), RoleOfThisThread());
  }
  if (type == format::RecordType::kFree) live_->OnFree(addr);
}

void Recorder::PrintPassWarnings() {
  if (live_ == nullptr) return;
  if (const std::string lines = live_->TakePassWarnings(); !lines.empty()) {
    std::fputs(lines.c_str(), stderr);
  }
}

Recorder::CallScope::CallScope(Recorder* recorder) {
  // Before the allocator's lock: what the allocations before this one found is said now.
  if (recorder != nullptr) recorder->PrintPassWarnings();
  if (recorder == nullptr || recorder->paused() || t_call_stack.recorder != nullptr) {
    return;  // no trace, paused, or an outer scope took the stack already
  }
  // Skip this constructor: the stack starts at the caller (the C ABI's entry point).
  {
    CostTimer timer(recorder->options_.measure_cost, recorder->cost_.captures,
                    recorder->cost_.capture_ns);
    t_call_stack.stack_id = recorder->CaptureStack(0, 1, /*may_take_gil=*/true);
  }
  t_call_stack.recorder = recorder;
  active_ = true;
}

Recorder::CallScope::~CallScope() {
  if (active_) t_call_stack = CallStack{};
}

__attribute__((noinline)) std::uint32_t Recorder::CaptureStack(std::uint32_t api_frame,
                                                               std::size_t skip,
                                                               bool may_take_gil,
                                                               bool with_native) {
  const bool python = options_.stacks == StackMode::kPython || options_.stacks == StackMode::kAll;
  const bool native = options_.stacks == StackMode::kNative ||
                      options_.stacks == StackMode::kAll || (with_native && python);
  if (!native && !python && api_frame == 0) return 0;
  constexpr std::size_t kMax = 256;
  RawFrame frames[kMax];
  std::size_t n = 0;
  if (api_frame != 0) frames[n++] = RawFrame{api_frame, 0, RawFrame::kNamedTag};
  // "all": native frames (innermost) then the Python frames of the same thread.
  if (native) {
    n += CaptureNativeStack(frames + n, std::min(options_.max_native_frames, kMax - n),
                            skip + kOwnFrames);
  }
  PythonStacks& py = PythonStacks::Get();
  // Held through Intern too: naming a new code object calls into Python. Taken before
  // the stack table's lock, never inside it, so a GIL holder waiting there cannot block us.
  std::optional<PythonStacks::Gil> gil;
  std::size_t found = 0;
  // An autograd engine thread running a C++ backward node has a Python thread state but
  // no Python frame: reading that would cost a GIL round trip for nothing (23221 of gpt2's
  // 45118 captures in 30 steps on an H100); the autograd link names the forward op instead.
  // Python-defined Functions (PyNode) run Python code there, so they are still read.
  if (python && py.available() && !RunningCppBackwardNode()) {
    const std::size_t limit = std::min(options_.max_python_frames, kMax - n);
    FrameHasher hasher;  // the walk below hashes its frames as it reads them
    for (std::size_t i = 0; i < n; ++i) hasher.Add(frames[i]);
    // Once the frame layout has been checked, a stack seen before costs no GIL at all:
    // in a training loop, every allocation after the first step.
    if (const std::optional<std::size_t> own = py.CaptureOwn(frames + n, limit, &hasher)) {
      const auto count = [&](std::atomic<std::uint64_t>& counter) {
        if (options_.measure_cost) counter.fetch_add(1, std::memory_order_relaxed);
      };
      if (*own == 0) {  // no Python frame: nothing to name
        count(cost_.without_gil);
        count(cost_.no_python);
        return n == 0 ? 0 : ring_->stacks().Intern(frames, n);
      }
      const std::size_t total = n + *own;
      if (const std::uint32_t id = ring_->stacks().Find(frames, total, hasher.Finish(total));
          id != 0) {
        count(cost_.without_gil);
        return id;
      }
      // A new stack: read again below under the GIL, which naming its new frames needs.
    }
    gil.emplace(py, may_take_gil);
    found = py.Capture(*gil, frames + n, limit);
    n += found;
  }
  if (python && options_.measure_cost) {
    if (gil.has_value() && gil->took()) cost_.gil_taken.fetch_add(1, std::memory_order_relaxed);
    if (found == 0) cost_.no_python.fetch_add(1, std::memory_order_relaxed);
  }
  if (n == 0) return 0;
  return ring_->stacks().Intern(frames, n, &NamePythonCode);
}

__attribute__((noinline)) void Recorder::RecordEvent(format::RecordType type,
                                                     std::int32_t device, std::uint64_t addr,
                                                     std::uint64_t size, std::uint64_t stream,
                                                     std::uint32_t api_frame,
                                                     std::optional<std::uint64_t> extra,
                                                     std::size_t skip, bool with_native) {
  // This frame and CaptureStack's are the kOwnFrames left out.
  const std::uint32_t stack_id = CaptureStack(api_frame, skip, true, with_native);
  RawRecord r = MakeRecord(type, device, addr, size, stream, stack_id);
  SetExtra(&r, extra);
  Write(r);
}

__attribute__((noinline)) void Recorder::OnEvent(const AllocatorEvent& event) {
  if (event.kind == AllocatorEventKind::kAlloc && paused()) return;
  CostTimer timer(options_.measure_cost, cost_.records, cost_.record_ns);
  format::RecordType type = format::RecordType::kAlloc;
  switch (event.kind) {
    case AllocatorEventKind::kAlloc: type = format::RecordType::kAlloc; break;
    case AllocatorEventKind::kFree: type = format::RecordType::kFree; break;
    case AllocatorEventKind::kMap: type = format::RecordType::kMap; break;
    case AllocatorEventKind::kUnmap: type = format::RecordType::kUnmap; break;
    case AllocatorEventKind::kOom: type = format::RecordType::kOom; break;
  }
  // A free is attributed to its block's allocation site by readers; its own stack is
  // not worth the unwinding.
  // Under the allocator's lock: use the stack its caller's CallScope took, else take
  // what can be read without taking the GIL.
  std::uint32_t stack_id = 0;
  if (event.kind != AllocatorEventKind::kFree) {
    stack_id = t_call_stack.recorder == this ? t_call_stack.stack_id
                                             : CaptureStack(0, 0, /*may_take_gil=*/false);
  }
  RawRecord r = MakeRecord(type, event.device, event.ptr, event.bytes, event.stream, stack_id);
  TakeAutogradLink(&r);
  if (event.kind == AllocatorEventKind::kOom) {
    SetExtra(&r, DriverFreeOn(event.device));
    NoteOomStack(event.device, stack_id);
  }
  Write(r);
  if (live_ == nullptr) return;
  if (event.kind == AllocatorEventKind::kAlloc) {
    live_->OnAlloc(event.device, event.ptr, event.bytes, autograd_sites_->LiveStack(r),
                   RoleOfThisThread());
  } else if (event.kind == AllocatorEventKind::kFree) {
    live_->OnFree(event.ptr);
  }
}

std::uint64_t Recorder::Step(const std::optional<DriverMemory>& driver) {
  const std::uint64_t step = step_.fetch_add(1, std::memory_order_relaxed) + 1;
  RawRecord r;
  r.time_ns = TraceWriter::NowNs();
  r.type = format::RecordType::kStep;
  r.size = step;
  r.thread = TraceWriter::ThreadId();
  if (driver) {
    r.device = driver->device;
    r.addr = driver->free;
    r.stream = driver->total;
  }
  if (const std::uint8_t source = step_source_.load(std::memory_order_relaxed); source != 0) {
    r.has_extra = true;
    r.extra = source;
  }
  Write(r);
  if (live_ == nullptr) return step;
  if (const std::string warnings = live_->OnStep(step, step_source_.load(std::memory_order_relaxed));
      !warnings.empty()) {
    std::fputs(warnings.c_str(), stderr);
  }
  return step;
}

void Recorder::DescribeOom(std::int32_t device, OomVerdictInput* in) {
  in->figures.finished_steps = steps();
  const std::uint64_t oom = last_oom_stack_.exchange(0, std::memory_order_relaxed);
  const auto stack = static_cast<std::uint32_t>(oom);
  if (stack != 0 && static_cast<std::int32_t>(oom >> 32) == device) {
    in->request_keeper = report::KeeperInside(ring_->stacks().Frames(stack));
  }
  if (live_ != nullptr) {
    if (in->figures.allocated == 0) in->figures.allocated = live_->Live(device);
    if (in->figures.capacity == 0) in->figures.capacity = live_->Cap(device);
    live_->Describe(device, in);
  }
  in->trace_path = ring_->path();
  writer().Flush();
}

void Recorder::NoteOomStack(std::int32_t device, std::uint32_t stack) {
  const auto high = static_cast<std::uint64_t>(static_cast<std::uint32_t>(device)) << 32;
  last_oom_stack_.store(high | stack, std::memory_order_relaxed);
}

void Recorder::RecordCapacity(std::int32_t device, std::uint64_t bytes,
                              format::CapacitySource source) {
  RawRecord r;
  r.time_ns = TraceWriter::NowNs();
  r.type = format::RecordType::kCapacity;
  r.device = device;
  r.size = bytes;
  r.thread = TraceWriter::ThreadId();
  r.has_extra = true;
  r.extra = static_cast<std::uint8_t>(source);
  Write(r);
  if (live_ != nullptr) live_->SetCap(device, bytes);
}

void Recorder::MarkLoopThread() { t_runs_loop = true; }

void Recorder::StepsComing() {
  if (live_ != nullptr) live_->StepsComing();
  if (!steps_coming_noted_.exchange(true)) Annotate(-1, std::string(format::kStepsComingNote));
}

void Recorder::NoteLoopThread() {
  if (t_loop_noted) return;
  Annotate(-1, format::LoopThreadNoteText(TraceWriter::ThreadId()));
  t_loop_noted = true;
}

void Recorder::Annotate(std::int32_t device, const std::string& name, bool start) {
  writer().Annotate(device, name, start);
}

void Recorder::GraphPool(std::int32_t device, const format::GraphPoolNote& note) {
  Annotate(device, format::GraphPoolNoteText(note), true);
  if (live_ != nullptr) live_->OnGraphPool(device, note);
}

}  // namespace gpumem
