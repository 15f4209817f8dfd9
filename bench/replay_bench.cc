// Replay throughput: trace events per second through each policy on SimBackend, on a
// real trace (varlen_bert by default: 178k events), with each policy's time as a ratio
// to the pytorch emulation measured in the same run. Target: >= 2M events/s.
//   build-x/bin/replay_bench [TRACE] [--benchmark_min_time=0.5]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>

#include "allocator/policies.h"
#include "tools/replay/replayer.h"
#include "tools/trace/load.h"

namespace gpumem::replay {
namespace {

trace::Trace* g_trace = nullptr;
std::map<std::string, double> g_events_per_second;

void BM_Replay(benchmark::State& state, const std::string& policy) {
  double seconds = 0;
  for (auto _ : state) {
    absl::StatusOr<ReplayResult> r = Replay(*g_trace, policy);
    if (!r.ok()) {
      state.SkipWithError(std::string(r.status().message()).c_str());
      return;
    }
    seconds += r->seconds;
    benchmark::DoNotOptimize(r->peak_reserved);
  }
  const double events = static_cast<double>(g_trace->events.size()) * state.iterations();
  state.SetItemsProcessed(static_cast<std::int64_t>(events));
  // The replay loop alone, without building and tearing down the backend.
  state.counters["events_per_s"] = events / seconds;
  g_events_per_second[policy] = events / seconds;
}

}  // namespace
}  // namespace gpumem::replay

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  std::string path = std::string(GPUMEM_TEST_DATA) + "/varlen_bert.trace.tsv.gz";
  if (argc > 1) path = argv[1];
  absl::StatusOr<gpumem::trace::Trace> trace = gpumem::trace::LoadTrace(path);
  if (!trace.ok()) {
    std::fprintf(stderr, "replay_bench: %s\n", std::string(trace.status().message()).c_str());
    return 2;
  }
  gpumem::replay::g_trace = &*trace;
  for (const std::string& policy : gpumem::PolicyNames()) {
    benchmark::RegisterBenchmark(("BM_Replay/" + policy).c_str(), gpumem::replay::BM_Replay,
                                 policy)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const auto& eps = gpumem::replay::g_events_per_second;
  auto peer = eps.find("pytorch");
  std::printf("\n%s: %zu events\n%-20s %14s %18s %8s\n", path.c_str(), trace->events.size(),
              "policy", "events/s", "vs pytorch (time)", "target");
  for (const auto& [policy, rate] : eps) {
    const double ratio = peer == eps.end() ? 0 : peer->second / rate;
    std::printf("%-20s %14.0f %17.2fx %8s\n", policy.c_str(), rate, ratio,
                rate >= 2e6 ? "met" : "MISSED");
  }
  return 0;
}
