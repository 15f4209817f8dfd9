// Cost of recording one allocator event, against an observer that does nothing (the
// floor: one virtual call). Prints each recorder's cost as a ratio to that floor and the
// nanoseconds it adds per event.
//   build-x/bin/recorder_bench [--benchmark_min_time=0.5]
#include <benchmark/benchmark.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "profiler/recorder.h"
#include "profiler/stack_table.h"

namespace gpumem {
namespace {

class EmptyObserver final : public AllocatorObserver {
 public:
  void OnEvent(const AllocatorEvent& event) override { benchmark::DoNotOptimize(&event); }
};

// The call site the allocator would be: a few frames deep, like a real allocation.
__attribute__((noinline)) void Site3(AllocatorObserver* o, const AllocatorEvent& e) {
  o->OnEvent(e);
  benchmark::ClobberMemory();
}
__attribute__((noinline)) void Site2(AllocatorObserver* o, const AllocatorEvent& e) {
  Site3(o, e);
  benchmark::ClobberMemory();
}
__attribute__((noinline)) void Site1(AllocatorObserver* o, const AllocatorEvent& e) {
  Site2(o, e);
  benchmark::ClobberMemory();
}

// Work between two events: about a microsecond of arithmetic, as a training loop spends
// tens of microseconds between allocations. The writer thread then drains alongside, as
// in a real run, so each record pays for the ring's cache lines moving between cores,
// which back-to-back events (pace 0) mostly hide.
__attribute__((noinline)) std::uint64_t Work(int rounds) {
  std::uint64_t x = 0x9e3779b97f4a7c15u;
  for (int i = 0; i < rounds; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    benchmark::DoNotOptimize(x);
  }
  return x;
}
constexpr int kPacedRounds = 400;

void Run(benchmark::State& state, AllocatorObserver* observer, int pace = 0) {
  AllocatorEvent e{AllocatorEventKind::kAlloc, 0, 0x7f0000000000, 4096, 0};
  for (auto _ : state) {
    e.ptr += 4096;
    Site1(observer, e);
    if (pace > 0) benchmark::DoNotOptimize(Work(pace));
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_EmptyObserver(benchmark::State& state) {
  EmptyObserver observer;
  Run(state, &observer);
}

void BM_EmptyObserverPaced(benchmark::State& state) {
  EmptyObserver observer;
  Run(state, &observer, kPacedRounds);
}

void BM_Recorder(benchmark::State& state, StackMode mode, std::size_t ring = 1 << 16,
                 int pace = 0) {
  RecorderOptions options;
  options.path = (std::filesystem::temp_directory_path() / "gpumem_recorder_bench_%p.gpumem").string();
  options.stacks = mode;
  options.writer.ring_records = ring;
  auto recorder = Recorder::Open(options);
  if (!recorder.ok()) {
    state.SkipWithError(std::string(recorder.status().message()).c_str());
    return;
  }
  Run(state, recorder->get(), pace);
  // Include the drain: a recorder that only buffered would look free.
  (*recorder)->Flush();
  state.counters["trace_bytes_per_event"] = 0;
  const std::string path = (*recorder)->writer().path();
  (void)(*recorder)->Close();
  // Disk space, not length: a closed trace's journal regions are holes.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    state.counters["trace_bytes_per_event"] =
        static_cast<double>(st.st_blocks) * 512 / static_cast<double>(state.iterations());
  }
  std::remove(path.c_str());
}

// A training loop's pattern: each block freed soon after (here: the one before), so the
// live set stays small, with the live view (live bytes by site) on and off, and in a
// bounded trace (GPUMEM_TRACE_MAX = `max_bytes`; 4 MiB, below what the variable allows,
// rotates a segment every few hundred thousand events of this stream, far more often
// than a real run: the rotations' cost is in the figure; `segments` counts them).
void BM_RecorderAllocFree(benchmark::State& state, bool live_view, std::uint64_t max_bytes = 0) {
  RecorderOptions options;
  options.path = (std::filesystem::temp_directory_path() / "gpumem_recorder_bench_%p.gpumem").string();
  options.stacks = StackMode::kNone;
  options.live_view = live_view;
  options.trace_max_bytes = max_bytes;
  auto recorder = Recorder::Open(options);
  if (!recorder.ok()) {
    state.SkipWithError(std::string(recorder.status().message()).c_str());
    return;
  }
  AllocatorEvent alloc{AllocatorEventKind::kAlloc, 0, 0x7f0000000000, 4096, 0};
  AllocatorEvent free{AllocatorEventKind::kFree, 0, 0, 4096, 0};
  for (auto _ : state) {
    free.ptr = alloc.ptr;
    alloc.ptr += 4096;
    Site1(recorder->get(), alloc);
    benchmark::DoNotOptimize(Work(kPacedRounds));
    Site1(recorder->get(), free);
    benchmark::DoNotOptimize(Work(kPacedRounds));
  }
  state.SetItemsProcessed(2 * state.iterations());
  (*recorder)->Flush();
  const std::string path = (*recorder)->trace_path();
  state.counters["segments"] = static_cast<double>((*recorder)->ring().segment() + 1);
  (void)(*recorder)->Close();
  std::remove(path.c_str());
  for (std::uint64_t k = 0; max_bytes > 0 && k <= (*recorder)->ring().segment(); ++k) {
    std::remove((path.substr(0, path.size() - 7) + ".seg" + std::to_string(k) + ".gpumem").c_str());
  }
}

BENCHMARK(BM_EmptyObserver);
BENCHMARK_CAPTURE(BM_Recorder, no_stacks, StackMode::kNone);
BENCHMARK_CAPTURE(BM_Recorder, native_stacks, StackMode::kNative);
BENCHMARK_CAPTURE(BM_Recorder, python_stacks_without_python, StackMode::kPython);
// The writer's default ring (2048 records, 128 KiB of journal per thread): fewer pages,
// so fewer TLB misses than the 4 MiB ring above, but more drains.
BENCHMARK_CAPTURE(BM_Recorder, no_stacks_default_ring, StackMode::kNone,
                  TraceWriterOptions{}.ring_records);
BENCHMARK(BM_EmptyObserverPaced);
BENCHMARK_CAPTURE(BM_Recorder, no_stacks_default_ring_paced, StackMode::kNone,
                  TraceWriterOptions{}.ring_records, kPacedRounds);
BENCHMARK_CAPTURE(BM_RecorderAllocFree, paced_live_view_off, false);
BENCHMARK_CAPTURE(BM_RecorderAllocFree, paced_live_view_on, true);
BENCHMARK_CAPTURE(BM_RecorderAllocFree, paced_live_view_on_ring_4M, true, 4 << 20);

// A step mark with `range(0)` sites each holding a block (and one block allocated and
// freed within each step): what the live view's step end costs the marking thread. The
// Python package marks a step at each optimizer step, or in a loop with no optimizer at
// each backward pass or model call: once a token in a generation loop.
// A recorder of no stacks writing to a temporary trace named `name`; nullptr (and the
// benchmark skipped) where it cannot open.
std::unique_ptr<Recorder> OpenStepRecorder(benchmark::State& state, const char* name) {
  RecorderOptions options;
  options.path = (std::filesystem::temp_directory_path() / name).string();
  options.stacks = StackMode::kNone;
  auto recorder = Recorder::Open(options);
  if (!recorder.ok()) {
    state.SkipWithError(std::string(recorder.status().message()).c_str());
    return nullptr;
  }
  return std::move(*recorder);
}

void CloseAndRemove(Recorder& r) {
  const std::string path = r.trace_path();
  (void)r.Close();
  std::remove(path.c_str());
}

void BM_StepMark(benchmark::State& state) {
  std::unique_ptr<Recorder> recorder = OpenStepRecorder(state, "gpumem_recorder_bench_%p.gpumem");
  if (recorder == nullptr) return;
  Recorder& r = *recorder;
  StackTable& stacks = r.writer().stacks();
  std::uint64_t addr = 0x7f0000000000;
  std::vector<std::uint32_t> sites;
  for (std::int64_t i = 0; i < state.range(0); ++i) {
    const std::uint32_t frame = stacks.InternNamedFrame(
        format::FrameKind::kPython, "site", "train.py", static_cast<int>(i + 1));
    const RawFrame raw{frame, 0, RawFrame::kNamedTag};
    sites.push_back(stacks.Intern(&raw, 1));
    r.RecordWithStack(format::RecordType::kAlloc, 0, addr += 1 << 20, 4096, 0, sites.back());
  }
  for (auto _ : state) {
    r.RecordWithStack(format::RecordType::kAlloc, 0, addr += 1 << 20, 4096, 0, sites[0]);
    r.RecordWithStack(format::RecordType::kFree, 0, addr, 0, 0, 0);
    benchmark::DoNotOptimize(r.Step());
  }
  state.SetItemsProcessed(state.iterations());
  CloseAndRemove(r);
}
BENCHMARK(BM_StepMark)->Arg(10)->Arg(100)->Arg(1000);

// A step mark where a new site appears at each step and lives `range(0)` steps (outputs
// of varying shapes kept for a while): young sites, each with a coarse series of its own
// that is fitted at its own coarse samples.
void BM_StepMarkNewSites(benchmark::State& state) {
  std::unique_ptr<Recorder> recorder =
      OpenStepRecorder(state, "gpumem_recorder_bench_new_%p.gpumem");
  if (recorder == nullptr) return;
  Recorder& r = *recorder;
  StackTable& stacks = r.writer().stacks();
  const std::size_t lifetime = static_cast<std::size_t>(state.range(0));
  std::deque<std::uint64_t> alive;
  std::uint64_t addr = 0x7f0000000000;
  int line = 0;
  for (auto _ : state) {
    const std::uint32_t frame =
        stacks.InternNamedFrame(format::FrameKind::kPython, "keep", "train.py", ++line);
    const RawFrame raw{frame, 0, RawFrame::kNamedTag};
    r.RecordWithStack(format::RecordType::kAlloc, 0, addr += 1 << 20, 1 << 20, 0,
                      stacks.Intern(&raw, 1));
    alive.push_back(addr);
    if (alive.size() > lifetime) {
      r.RecordWithStack(format::RecordType::kFree, 0, alive.front(), 0, 0, 0);
      alive.pop_front();
    }
    benchmark::DoNotOptimize(r.Step());
  }
  state.SetItemsProcessed(state.iterations());
  CloseAndRemove(r);
}
BENCHMARK(BM_StepMarkNewSites)->Arg(100)->Arg(250);

// `depth` Python frames (code object, bytecode offset), as a deep model makes them.
std::vector<RawFrame> PythonFrames(std::int64_t depth) {
  std::vector<RawFrame> frames;
  for (std::int64_t i = 0; i < depth; ++i) {
    frames.push_back(RawFrame{0x7f0000100000u + 0x1000u * static_cast<std::uint64_t>(i),
                              static_cast<std::uint32_t>(40 + 2 * i), RawFrame::kPythonLastiTag});
  }
  return frames;
}

// The stack table's cost for a stack it knows already (every event but a site's first),
// `range(0)` frames deep, hashed here.
void BM_InternKnownPythonStack(benchmark::State& state) {
  StackTable table;
  const std::vector<RawFrame> frames = PythonFrames(state.range(0));
  table.Intern(frames.data(), frames.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(table.Intern(frames.data(), frames.size()));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_InternKnownPythonStack)->Arg(10)->Arg(30);

// The Python path's lookup: the walk hashed the frames as it read them (FrameHasher), so
// a known stack costs the thread's cache and one compare.
void BM_FindKnownPythonStackHashed(benchmark::State& state) {
  StackTable table;
  const std::vector<RawFrame> frames = PythonFrames(state.range(0));
  table.Intern(frames.data(), frames.size());
  const std::size_t hash = HashFrames(frames.data(), frames.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(table.Find(frames.data(), frames.size(), hash));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_FindKnownPythonStackHashed)->Arg(10)->Arg(30);

// Keeps each benchmark's time per iteration for the ratios printed at the end.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration && r.iterations > 0) {
        // CPU time of the recording thread: what the application pays per event. (Wall
        // time also counts waiting for a core, which on a loaded machine is noise.)
        ns_[r.benchmark_name()] = r.GetAdjustedCPUTime();  // in the run's time unit (ns)
      }
    }
  }
  void PrintRatios() const {
    auto floor = ns_.find("BM_EmptyObserver");
    auto paced_floor = ns_.find("BM_EmptyObserverPaced");
    if (floor == ns_.end()) return;
    std::printf("\nCPU time per event on the recording thread, against the empty observer "
                "(%.2f ns):\n", floor->second);
    for (const auto& [name, ns] : ns_) {
      if (name == floor->first || name.find("Paced") != std::string::npos ||
          name.find("_paced") != std::string::npos) {
        continue;
      }
      std::printf("  %-45s %8.2f ns  = %6.1fx  (+%.2f ns)\n", name.c_str(), ns,
                  ns / floor->second, ns - floor->second);
    }
    if (paced_floor == ns_.end()) return;
    std::printf("With ~1 us of work between events, against the empty observer so paced "
                "(%.2f ns):\n", paced_floor->second);
    for (const auto& [name, ns] : ns_) {
      if (name.find("_paced") == std::string::npos) continue;
      std::printf("  %-45s %8.2f ns  (+%.2f ns per event)\n", name.c_str(), ns,
                  ns - paced_floor->second);
    }
  }

 private:
  std::map<std::string, double> ns_;
};

}  // namespace
}  // namespace gpumem

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  gpumem::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintRatios();
  benchmark::Shutdown();
  return 0;
}
