// `gpumem report` end to end on a 10-million-event trace in each file form it reads: the
// flattened .trace.tsv, the same gzipped (.trace.tsv.gz), and a gpumem trace written by
// the profiler's own TraceWriter. Each report runs as a child process, as a user runs it;
// its wall time and peak RSS (wait4's ru_maxrss) are printed against the target of issue
// 6: <= 10 s within 2 GB on 2 cores. The traces are tools/report/synthetic.h's LargeTrace
// (10k events a step from 64 sites) with a 1 MiB-per-step leak at train.py:42.
//
//   report_files_bench GPUMEM_BINARY [--events N] [--dir DIR] [--keep] [--check]
//
// --check (the ctest smoke run, with a small --events): fail unless every report exits 0
// and all three forms give the same verdict. Without it only a failed report fails.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "bench/gpumem_trace_out.h"
#include "tools/report/synthetic.h"
#include "tools/trace/trace.h"

namespace gpumem::bench {
namespace {

constexpr std::uint64_t kLeakPerStep = 1 << 20;
constexpr double kTargetSeconds = 10.0;
constexpr double kTargetMiB = 2000.0 * 1e6 / (1 << 20);  // 2 GB

// Writes `t` as .trace.tsv and .trace.tsv.gz (gzip's default level) in one pass.
bool WriteTsv(const trace::Trace& t, const std::string& tsv_path, const std::string& gz_path) {
  std::ofstream tsv(tsv_path, std::ios::binary);
  gzFile gz = gzopen(gz_path.c_str(), "wb6");
  if (!tsv || gz == nullptr) return false;
  bool ok = true;
  std::string buf;
  auto flush = [&] {
    tsv << buf;
    ok = ok && gzwrite(gz, buf.data(), static_cast<unsigned>(buf.size())) == static_cast<int>(buf.size());
    buf.clear();
  };
  buf += "# seq\taction\taddr\tsize\tstream\ttime_us\tstack\n";
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const trace::Event& e = t.events[i];
    absl::StrAppend(&buf, i, "\t", trace::ActionName(e.action), "\t", e.addr, "\t", e.size, "\t",
                    e.stream, "\t", e.time_us, "\t", e.stack_id, "\n");
    if (buf.size() > (1 << 20)) flush();
  }
  for (std::size_t s = 0; s < t.stacks.size(); ++s) {
    absl::StrAppend(&buf, "S\t", s, "\t");
    for (std::size_t k = 0; k < t.stacks[s].size(); ++k) {
      const trace::Frame& f = t.frames[t.stacks[s][k]];
      absl::StrAppend(&buf, k ? " | " : "", f.filename, ":", f.line, ":", f.function);
    }
    buf += '\n';
  }
  flush();
  tsv.close();
  return ok && gzclose(gz) == Z_OK && tsv.good();
}

struct RunResult {
  bool ok = false;
  double seconds = 0;
  double peak_mib = 0;
  double cpu_seconds = 0;  // user + system: what the run costs on an idle machine, roughly
  std::string verdict;
};

// Runs `gpumem report FILE` with its output in FILE.out; the verdict is its "Verdict:" line.
RunResult TimeReport(const std::string& binary, const std::string& file) {
  RunResult result;
  const std::string out_path = file + ".out";
  std::fflush(stdout);  // or the child's freopen writes our buffered lines again
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    if (std::freopen(out_path.c_str(), "w", stdout) == nullptr) _exit(127);
    execl(binary.c_str(), binary.c_str(), "report", file.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  if (pid < 0 || wait4(pid, &status, 0, &usage) != pid) return result;
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.peak_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  result.cpu_seconds = seconds(usage.ru_utime) + seconds(usage.ru_stime);
  result.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::ifstream out(out_path);
  for (std::string line; std::getline(out, line);) {
    if (line.rfind("Verdict:", 0) == 0) result.verdict = line;
  }
  if (!result.ok) std::fprintf(stderr, "gpumem report %s failed; its output is in %s\n", file.c_str(), out_path.c_str());
  else std::remove(out_path.c_str());
  return result;
}

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string one, five, fifteen;
  in >> one >> five >> fifteen;
  return absl::StrCat(one, " ", five, " ", fifteen);
}

int Main(int argc, char** argv) {
  CLI::App app("Times gpumem report on a large trace as .trace.tsv, .trace.tsv.gz and .gpumem");
  std::string binary;
  std::size_t events = 10'000'000;
  std::string dir = std::filesystem::temp_directory_path().string();
  bool keep = false;
  bool check = false;
  app.add_option("gpumem", binary, "the gpumem command-line binary")->required();
  app.add_option("--events", events, "events in each trace (default 10M)");
  app.add_option("--dir", dir, "where to write the trace files");
  app.add_flag("--keep", keep, "keep the trace files");
  app.add_flag("--check", check, "fail unless all three reports succeed with the same verdict");
  CLI11_PARSE(app, argc, argv);

  const std::string base = absl::StrCat(dir, "/report_files_bench.", getpid());
  const std::string tsv = base + ".trace.tsv", gz = base + ".trace.tsv.gz", gm = base + ".gpumem";
  std::size_t tsv_events = 0;
  std::uint64_t gm_events = 0;
  {
    const trace::Trace t = report::synthetic::LargeTrace(events, 10000, 64, kLeakPerStep);
    tsv_events = t.events.size();
    if (!WriteTsv(t, tsv, gz)) {
      std::fprintf(stderr, "cannot write %s / %s\n", tsv.c_str(), gz.c_str());
      return 1;
    }
  }
  {
    // A third of the events are "free completed", which gpumem traces do not have: make
    // the trace longer so that the gpumem file, too, holds `events` events.
    const trace::Trace t = report::synthetic::LargeTrace(events * 3 / 2, 10000, 64, kLeakPerStep);
    gm_events = WriteGpumemTrace(t, gm);
    if (gm_events == 0) return 1;
  }
  auto mib = [](const std::string& p) { return static_cast<double>(std::filesystem::file_size(p)) / (1 << 20); };
  std::printf("load average before the runs: %s (%ld cores)\n", LoadAverage().c_str(), sysconf(_SC_NPROCESSORS_ONLN));
  struct Case {
    const char* what;
    std::string path;
    std::uint64_t events;
  };
  const Case cases[] = {{"tsv", tsv, tsv_events}, {"tsv.gz", gz, tsv_events}, {"gpumem", gm, gm_events}};
  bool failed = false;
  std::string first_verdict;
  std::printf("%-8s %12s %10s %9s %9s %12s   target: wall <= %.0f s, peak <= %.0f MiB\n", "form", "events",
              "file MiB", "wall s", "CPU s", "peak MiB", kTargetSeconds, kTargetMiB);
  for (const Case& c : cases) {
    const RunResult r = TimeReport(binary, c.path);
    const bool within = r.seconds <= kTargetSeconds && r.peak_mib <= kTargetMiB;
    std::printf("%-8s %12llu %10.1f %9.2f %9.2f %12.0f   %s\n", c.what, static_cast<unsigned long long>(c.events),
                mib(c.path), r.seconds, r.cpu_seconds, r.peak_mib, !r.ok ? "FAILED" : within ? "ok" : "OVER TARGET");
    std::fflush(stdout);
    failed = failed || !r.ok;
    if (check && r.ok) {
      if (first_verdict.empty()) first_verdict = r.verdict;
      if (r.verdict.empty() || r.verdict != first_verdict) {
        std::fprintf(stderr, "%s: verdict '%s' differs from '%s'\n", c.what, r.verdict.c_str(),
                     first_verdict.c_str());
        failed = true;
      }
    }
  }
  std::printf("load average after the runs: %s\n", LoadAverage().c_str());
  if (!keep) {
    for (const Case& c : cases) std::remove(c.path.c_str());
  } else {
    std::printf("kept: %s %s %s\n", tsv.c_str(), gz.c_str(), gm.c_str());
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace gpumem::bench

int main(int argc, char** argv) { return gpumem::bench::Main(argc, argv); }
