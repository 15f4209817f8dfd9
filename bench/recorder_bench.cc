// Cost of recording one allocator event, against an observer that does nothing (the
// floor: one virtual call). Prints each recorder's cost as a ratio to that floor and the
// nanoseconds it adds per event.
//   build-x/bin/recorder_bench [--benchmark_min_time=0.5]
#include <benchmark/benchmark.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
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

void Run(benchmark::State& state, AllocatorObserver* observer) {
  AllocatorEvent e{AllocatorEventKind::kAlloc, 0, 0x7f0000000000, 4096, 0};
  for (auto _ : state) {
    e.ptr += 4096;
    Site1(observer, e);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_EmptyObserver(benchmark::State& state) {
  EmptyObserver observer;
  Run(state, &observer);
}

void BM_Recorder(benchmark::State& state, StackMode mode, std::size_t ring = 1 << 16) {
  RecorderOptions options;
  options.path = (std::filesystem::temp_directory_path() / "gpumem_recorder_bench_%p.gpumem").string();
  options.stacks = mode;
  options.writer.ring_records = ring;
  auto recorder = Recorder::Open(options);
  if (!recorder.ok()) {
    state.SkipWithError(std::string(recorder.status().message()).c_str());
    return;
  }
  Run(state, recorder->get());
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

BENCHMARK(BM_EmptyObserver);
BENCHMARK_CAPTURE(BM_Recorder, no_stacks, StackMode::kNone);
BENCHMARK_CAPTURE(BM_Recorder, native_stacks, StackMode::kNative);
BENCHMARK_CAPTURE(BM_Recorder, python_stacks_without_python, StackMode::kPython);
// The writer's default ring (2048 records, 128 KiB of journal per thread): fewer pages,
// so fewer TLB misses than the 4 MiB ring above, but more drains.
BENCHMARK_CAPTURE(BM_Recorder, no_stacks_default_ring, StackMode::kNone,
                  TraceWriterOptions{}.ring_records);

// The stack table's cost for a stack it knows already (every event but a site's first):
// `range(0)` Python frames (code object, bytecode offset), as a deep model makes them.
void BM_InternKnownPythonStack(benchmark::State& state) {
  StackTable table;
  std::vector<RawFrame> frames;
  for (std::int64_t i = 0; i < state.range(0); ++i) {
    frames.push_back(RawFrame{0x7f0000100000u + 0x1000u * static_cast<std::uint64_t>(i),
                              static_cast<std::uint32_t>(40 + 2 * i), RawFrame::kPythonLastiTag});
  }
  table.Intern(frames.data(), frames.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(table.Intern(frames.data(), frames.size()));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_InternKnownPythonStack)->Arg(10)->Arg(30);

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
    if (floor == ns_.end()) return;
    std::printf("\nCPU time per event on the recording thread, against the empty observer "
                "(%.2f ns):\n", floor->second);
    for (const auto& [name, ns] : ns_) {
      if (name == floor->first) continue;
      std::printf("  %-45s %8.2f ns  = %6.1fx  (+%.2f ns)\n", name.c_str(), ns,
                  ns / floor->second, ns - floor->second);
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
