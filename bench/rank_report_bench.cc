// `gpumem report` over the traces of a many-rank job: N rank traces made from a real one
// (tests/data/varlen_bert, 178k events, 40 steps, recorded on an H100), each written as
// the profiler writes it with its header rewritten to rank i of N+1 on host node<i/8>;
// one rank (--leak-rank) keeps 64 MiB a step more at train.py:88, one (rank 1) is cut to
// half its file, and rank N has no trace. The merged report runs as a child process, as a
// user runs it; its wall time and peak RSS (wait4) are printed against the target:
// 256 ranks in <= 30 s within 1 GiB on 2 cores.
//
//   rank_report_bench GPUMEM_BINARY [--ranks N] [--leak-rank K] [--base TRACE] [--dir DIR]
//                     [--check]
//
// --check (the ctest run, with a small N): fail unless the merged JSON has every rank by
// number, names the leaking rank first with its site, calls no other rank leaking, names
// the cut and the missing rank, and says the leaking rank runs out first.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "bench/gpumem_trace_out.h"
#include "nlohmann/json.hpp"
#include "tools/trace/load.h"

namespace gpumem::bench {
namespace {

constexpr std::uint64_t kLeakPerStep = 64ull << 20;
constexpr double kTargetSeconds = 30.0;
constexpr double kTargetMiB = 1024.0;

struct Args {
  std::string binary;
  std::size_t ranks = 256;
  std::size_t leak_rank = 17;
  std::string base = GPUMEM_BENCH_BASE_TRACE;
  std::string dir = "/tmp";
  bool check = false;
};

std::string RankPath(const Args& a, std::size_t rank) {
  return absl::StrCat(a.dir, "/rank_bench-", rank, ".gpumem");
}

// Writes rank i's trace: the healthy one, or the leaking one; rank 1 is then cut.
bool WriteRanks(const Args& a, const trace::Trace& healthy) {
  const trace::Trace leaking = WithLeak(healthy, kLeakPerStep, 40);
  for (std::size_t i = 0; i < a.ranks; ++i) {
    const std::map<std::string, std::string> header = {
        {"rank", std::to_string(i)}, {"local_rank", std::to_string(i % 8)},
        {"world_size", std::to_string(a.ranks + 1)}, {"host", absl::StrCat("node", i / 8)}};
    if (WriteGpumemTrace(i == a.leak_rank ? leaking : healthy, RankPath(a, i), header) == 0) {
      return false;
    }
  }
  if (a.ranks > 2) {  // a rank killed mid-write by a full disk: half its file
    std::filesystem::resize_file(RankPath(a, 1), std::filesystem::file_size(RankPath(a, 1)) / 2);
  }
  return true;
}

struct Timed {
  int status = -1;
  double seconds = 0, peak_mib = 0;
};

// Runs `gpumem report [--json] rank files...` with stdout into `out`.
Timed RunReport(const Args& a, bool json, const std::string& out) {
  std::vector<std::string> argv = {a.binary, "report"};
  if (json) argv.push_back("--json");
  for (std::size_t i = 0; i < a.ranks; ++i) argv.push_back(RankPath(a, i));
  std::vector<char*> cargv;
  for (std::string& s : argv) cargv.push_back(s.data());
  cargv.push_back(nullptr);
  std::fflush(stdout);
  Timed t;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    if (std::freopen(out.c_str(), "w", stdout) == nullptr) _exit(127);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  rusage usage{};
  if (pid < 0 || wait4(pid, &t.status, 0, &usage) != pid) return t;
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  t.peak_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
  return t;
}

// What --check requires of the merged JSON; "" when it holds.
std::string CheckMerged(const Args& a, const nlohmann::json& m) {
  if (m["ranks"].size() != a.ranks) return "not every rank is in merged.ranks";
  for (std::size_t i = 0; i < a.ranks; ++i) {
    const nlohmann::json& r = m["ranks"][i];
    if (r["rank"] != i) return absl::StrCat("merged.ranks[", i, "] is rank ", r["rank"].dump());
    const std::string differs = r["differs"];
    const bool leaks = differs.find("leaks") != std::string::npos;
    if (i == a.leak_rank && (!leaks || differs.find("train.py:88") == std::string::npos)) {
      return "the leaking rank is not named with its site: " + differs;
    }
    if (i != a.leak_rank && leaks) return absl::StrCat("rank ", i, " called leaking: ", differs);
    if (i == 1 && r["damage"] == "") return "the cut rank's damage is not said";
  }
  if (m["missing_ranks"] != nlohmann::json::array({a.ranks})) return "the missing rank is not named";
  const std::string first = m["first_out"];
  if (first.find(absl::StrCat("rank ", a.leak_rank, " ")) != 0) return "first out: " + first;
  return "";
}

int Check(const Args& a) {
  const std::string out = a.dir + "/rank_bench.json";
  const Timed t = RunReport(a, true, out);
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (t.status != 0 || j.is_discarded()) {
    std::fprintf(stderr, "gpumem report --json failed (status %d); output in %s\n", t.status, out.c_str());
    return 1;
  }
  const std::string problem = CheckMerged(a, j["merged"]);
  if (!problem.empty()) std::fprintf(stderr, "FAIL: %s\n", problem.c_str());
  else std::printf("ok: %zu ranks, rank %zu named leaking, rank 1 cut, rank %zu missing\n", a.ranks, a.leak_rank, a.ranks);
  return problem.empty() ? 0 : 1;
}

int Bench(const Args& a) {
  const std::string out = a.dir + "/rank_bench.txt";
  const Timed t = RunReport(a, false, out);
  std::printf("%zu ranks x %s: %.2f s, peak RSS %.0f MiB (target <= %.0f s, <= %.0f MiB): %s\n",
              a.ranks, a.base.c_str(), t.seconds, t.peak_mib, kTargetSeconds, kTargetMiB,
              t.status == 0 && t.seconds <= kTargetSeconds && t.peak_mib <= kTargetMiB ? "met" : "MISSED");
  std::printf("(report in %s; exit status %d)\n", out.c_str(), t.status);
  return t.status == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gpumem::bench

int main(int argc, char** argv) {
  gpumem::bench::Args a;
  CLI::App app("gpumem report over many ranks' traces: time and peak RSS");
  app.add_option("binary", a.binary, "the gpumem executable")->required();
  app.add_option("--ranks", a.ranks, "ranks with a trace (rank N is left missing)");
  app.add_option("--leak-rank", a.leak_rank, "the rank that leaks");
  app.add_option("--base", a.base, "the real trace each rank's is made from");
  app.add_option("--dir", a.dir, "where the rank traces go");
  app.add_flag("--check", a.check, "check the merged verdict instead of timing");
  CLI11_PARSE(app, argc, argv);
  if (a.leak_rank >= a.ranks || a.leak_rank == 1) {
    std::fprintf(stderr, "--leak-rank must be below --ranks and not 1 (the cut rank)\n");
    return 2;
  }
  absl::StatusOr<gpumem::trace::Trace> base = gpumem::trace::LoadTrace(a.base);
  if (!base.ok()) {
    std::fprintf(stderr, "%s\n", std::string(base.status().message()).c_str());
    return 2;
  }
  base->device_capacity = 80ull << 30;  // the H100 80GB it was recorded on
  if (!gpumem::bench::WriteRanks(a, *base)) return 2;
  return a.check ? gpumem::bench::Check(a) : gpumem::bench::Bench(a);
}
