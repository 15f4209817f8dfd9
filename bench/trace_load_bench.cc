// Loading a PyTorch snapshot pickle (xz + pickle + conversion to a Trace) against its peer,
// the same events in the flattened .tsv.gz form, measured in the same run, with the
// pickle path's stages apart. Target: varlen_bert (17.8 MB of pickle) well under 2 s.
//   build-x/bin/trace_load_bench [NAME=varlen_bert] [--benchmark_min_time=1]
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "tools/trace/decompress.h"
#include "tools/trace/load.h"
#include "tools/trace/pickle_reader.h"
#include "tools/trace/snapshot_reader.h"

namespace gpumem::trace {
namespace {

std::string g_pickle_path;
std::string g_tsv_path;
std::string g_pickle_bytes;  // decompressed
std::map<std::string, double> g_seconds;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Record(benchmark::State& state, const std::string& name, double seconds) {
  g_seconds[name] = seconds / static_cast<double>(state.iterations());
}

void BM_LoadPickle(benchmark::State& state) {
  double seconds = 0;
  std::size_t events = 0;
  for (auto _ : state) {
    auto start = Now();
    absl::StatusOr<Trace> t = LoadTrace(g_pickle_path);
    seconds += Now() - start;
    if (!t.ok()) return state.SkipWithError(std::string(t.status().message()).c_str());
    events = t->events.size();
  }
  state.counters["events"] = static_cast<double>(events);
  Record(state, "pickle.xz: LoadTrace", seconds);
}

void BM_LoadTsv(benchmark::State& state) {
  double seconds = 0;
  for (auto _ : state) {
    auto start = Now();
    absl::StatusOr<Trace> t = LoadTrace(g_tsv_path);
    seconds += Now() - start;
    if (!t.ok()) return state.SkipWithError(std::string(t.status().message()).c_str());
  }
  Record(state, "tsv.gz: LoadTrace (peer)", seconds);
}

void BM_Decompress(benchmark::State& state) {
  double seconds = 0;
  for (auto _ : state) {
    auto start = Now();
    absl::StatusOr<std::string> d = ReadFileDecompressed(g_pickle_path);
    seconds += Now() - start;
    benchmark::DoNotOptimize(d);
  }
  Record(state, "  stage: xz", seconds);
}

void BM_ReadPickle(benchmark::State& state) {
  double seconds = 0;
  for (auto _ : state) {
    auto start = Now();
    absl::StatusOr<PickleTree> tree = ReadPickle(g_pickle_bytes, g_pickle_path);
    seconds += Now() - start;
    benchmark::DoNotOptimize(tree);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(g_pickle_bytes.size()) * state.iterations());
  Record(state, "  stage: pickle", seconds);
}

void BM_Convert(benchmark::State& state) {
  absl::StatusOr<PickleTree> tree = ReadPickle(g_pickle_bytes, g_pickle_path);
  if (!tree.ok()) return state.SkipWithError(std::string(tree.status().message()).c_str());
  double seconds = 0;
  for (auto _ : state) {
    auto start = Now();
    absl::StatusOr<Trace> t = SnapshotToTrace(*tree, g_pickle_path);
    seconds += Now() - start;
    benchmark::DoNotOptimize(t);
  }
  Record(state, "  stage: convert", seconds);
}

}  // namespace
}  // namespace gpumem::trace

int main(int argc, char** argv) {
  using namespace gpumem::trace;
  benchmark::Initialize(&argc, argv);
  const std::string name = argc > 1 ? argv[1] : "varlen_bert";
  g_pickle_path = std::string(GPUMEM_TEST_DATA) + "/" + name + ".pickle.xz";
  g_tsv_path = std::string(GPUMEM_TEST_DATA) + "/" + name + ".trace.tsv.gz";
  absl::StatusOr<std::string> bytes = ReadFileDecompressed(g_pickle_path);
  if (!bytes.ok()) {
    std::fprintf(stderr, "trace_load_bench: %s\n", std::string(bytes.status().message()).c_str());
    return 2;
  }
  g_pickle_bytes = std::move(*bytes);
  using Fn = void (*)(benchmark::State&);
  const std::pair<const char*, Fn> benches[] = {{"BM_LoadPickle", BM_LoadPickle},
                                                {"BM_LoadTsv", BM_LoadTsv},
                                                {"BM_Decompress", BM_Decompress},
                                                {"BM_ReadPickle", BM_ReadPickle},
                                                {"BM_Convert", BM_Convert}};
  for (const auto& [bench_name, fn] : benches) {
    benchmark::RegisterBenchmark(bench_name, fn)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  auto peer = g_seconds.find("tsv.gz: LoadTrace (peer)");
  std::printf("\n%s (%zu bytes of pickle)\n%-28s %10s %12s\n", name.c_str(), g_pickle_bytes.size(),
              "", "ms", "vs tsv.gz");
  for (const auto& [label, s] : g_seconds) {
    std::printf("%-28s %10.1f %11.2fx\n", label.c_str(), s * 1e3,
                peer == g_seconds.end() ? 0.0 : s / peer->second);
  }
  auto pickle = g_seconds.find("pickle.xz: LoadTrace");
  if (pickle != g_seconds.end()) {
    std::printf("target: pickle.xz load < 2000 ms: %s\n", pickle->second < 2.0 ? "met" : "MISSED");
  }
  return 0;
}
