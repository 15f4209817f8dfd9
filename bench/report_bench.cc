// `gpumem report` on a 10-million-event synthetic trace (tools/report/synthetic.h):
// time of the full analysis (with and without the HTML page), as a ratio to its peer, a
// bare walk of the events through the live-block map that every analysis needs. The
// target: <= 10 s on 2 cores within 2 GB. Peak RSS is printed as a counter (MiB).
#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <unistd.h>

#include "benchmark/benchmark.h"
#include "tools/report/html_report.h"
#include "tools/report/json_report.h"
#include "tools/report/live_state.h"
#include "tools/report/report.h"
#include "tools/report/synthetic.h"
#include "tools/trace/load.h"

namespace gpumem::report {
namespace {

constexpr std::size_t kEvents = 10'000'000;

const trace::Trace& BigTrace() {
  static const trace::Trace* t = new trace::Trace(synthetic::LargeTrace(kEvents));
  return *t;
}

double PeakRssMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

void Finish(benchmark::State& state) {
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * BigTrace().events.size()));
  state.counters["peak_rss_MiB"] = PeakRssMiB();
  state.counters["events"] = static_cast<double>(BigTrace().events.size());
}

// The peer: one pass of the events through LiveState, nothing else.
void BM_WalkEvents(benchmark::State& state) {
  const trace::Trace& t = BigTrace();
  SiteTable sites(t);
  for (auto _ : state) {
    LiveState live(sites);
    for (const trace::Event& e : t.events) live.Apply(e);
    benchmark::DoNotOptimize(live.allocated());
  }
  Finish(state);
}

void BM_ReportJson(benchmark::State& state) {
  const trace::Trace& t = BigTrace();
  for (auto _ : state) {
    Report r = BuildReport(t, {});
    benchmark::DoNotOptimize(ReportToJson(r).dump());
  }
  Finish(state);
}

void BM_ReportJsonAndHtml(benchmark::State& state) {
  const trace::Trace& t = BigTrace();
  std::size_t html_bytes = 0;
  for (auto _ : state) {
    std::vector<Report> reports;
    reports.push_back(BuildReport(t, {}));
    html_bytes = RenderHtml(reports).size();
    benchmark::DoNotOptimize(ReportToJson(reports[0]).dump());
  }
  state.counters["html_KiB"] = static_cast<double>(html_bytes) / 1024.0;
  Finish(state);
}

// The same trace without its step markers: steps are then inferred from the repeating
// allocation pattern (the path PyTorch snapshots without annotations take). Holds a
// second copy of the trace, so run it last: it raises the peak RSS by ~540 MiB.
void BM_ReportInferredSteps(benchmark::State& state) {
  static const trace::Trace* unmarked = [] {
    auto* t = new trace::Trace(BigTrace());
    std::erase_if(t->events, [](const trace::Event& e) { return e.action == trace::Action::kStep; });
    return t;
  }();
  std::size_t steps = 0;
  for (auto _ : state) {
    Report r = BuildReport(*unmarked, {});
    steps = r.steps.count;
    benchmark::DoNotOptimize(ReportToJson(r).dump());
  }
  state.counters["steps_found"] = static_cast<double>(steps);
  Finish(state);
}

// End to end as the command runs it: read the trace file (the flattened .tsv form, which
// any trace can be written as), then the JSON report.
std::string TsvPath() {
  static const std::string path = [] {
    const char* dir = std::getenv("TMPDIR");
    std::string p = std::string(dir ? dir : "/tmp") + "/gpumem_report_bench." + std::to_string(getpid()) + ".trace.tsv";
    const trace::Trace& t = BigTrace();
    std::ofstream out(p, std::ios::binary);
    std::string buf;
    for (std::size_t i = 0; i < t.events.size(); ++i) {
      const trace::Event& e = t.events[i];
      buf += std::to_string(i) + '\t' + trace::ActionName(e.action) + '\t' + std::to_string(e.addr) + '\t' +
             std::to_string(e.size) + '\t' + std::to_string(e.stream) + '\t' + std::to_string(e.time_us) +
             '\t' + std::to_string(e.stack_id) + '\n';
      if (buf.size() > (1 << 20)) {
        out << buf;
        buf.clear();
      }
    }
    for (std::size_t s = 0; s < t.stacks.size(); ++s) {
      buf += "S\t" + std::to_string(s) + '\t';
      for (std::size_t k = 0; k < t.stacks[s].size(); ++k) {
        const trace::Frame& f = t.frames[t.stacks[s][k]];
        buf += (k ? " | " : "") + f.filename + ':' + std::to_string(f.line) + ':' + f.function;
      }
      buf += '\n';
    }
    out << buf;
    return p;
  }();
  return path;
}

void BM_LoadTsvAndReport(benchmark::State& state) {
  const std::string path = TsvPath();
  for (auto _ : state) {
    absl::StatusOr<trace::Trace> t = trace::LoadTrace(path);
    if (!t.ok()) {
      state.SkipWithError(std::string(t.status().message()).c_str());
      break;
    }
    Report r = BuildReport(*t, {});
    benchmark::DoNotOptimize(ReportToJson(r).dump());
  }
  std::remove(path.c_str());
  Finish(state);
}

BENCHMARK(BM_WalkEvents)->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_ReportJson)->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_ReportJsonAndHtml)->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_ReportInferredSteps)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_LoadTsvAndReport)->Unit(benchmark::kMillisecond)->Iterations(1);

// Prints the ratio of each report run to the walk, measured in this run.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      const double seconds = run.GetAdjustedRealTime() / 1e3;
      if (run.benchmark_name().find("WalkEvents") != std::string::npos) walk_ = seconds;
      else if (walk_ > 0) {
        std::printf("  %s: %.2f s for %zu events = %.1fx the bare walk (%.2f s); target <= 10 s\n",
                    run.benchmark_name().c_str(), seconds, BigTrace().events.size(), seconds / walk_, walk_);
      }
    }
  }

 private:
  double walk_ = 0;
};

}  // namespace
}  // namespace gpumem::report

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  gpumem::report::BigTrace();  // built outside the timings
  std::printf("trace: %zu events, peak RSS after building it %.0f MiB\n",
              gpumem::report::BigTrace().events.size(), gpumem::report::PeakRssMiB());
  gpumem::report::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  std::printf("peak RSS of the whole run: %.0f MiB (target: within 2 GB)\n", gpumem::report::PeakRssMiB());
  benchmark::Shutdown();
  return 0;
}
