// The policy hot path on SimBackend: warm alloc+free pairs of small (512 B - 1 MiB) and
// large (2 - 256 MiB) sizes, on 1 and 8 threads sharing one allocator, for "gpumem" and
// the "pytorch" emulation side by side. Prints ns per pair and gpumem/pytorch ratios.
// Goal (issue 3): small pairs <= 50 ns, large <= 200 ns single-threaded.
// GPUMEM_THREAD_CACHE=0 measures gpumem without its per-thread caches (as the C ABI does).
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/policies.h"
#include "allocator/sim_backend.h"

namespace gpumem {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr int kSizes = 256;

// Log-uniform sizes in [lo, hi], fixed seed: every policy sees the same sequence.
std::vector<std::size_t> Sizes(std::size_t lo, std::size_t hi) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> u(std::log(double(lo)), std::log(double(hi)));
  std::vector<std::size_t> sizes(kSizes);
  for (std::size_t& s : sizes) s = static_cast<std::size_t>(std::exp(u(rng)));
  return sizes;
}

struct Subject {
  std::unique_ptr<SimBackend> backend;
  std::unique_ptr<DeviceAllocator> allocator;
};

// One allocator per (policy, size range), shared by the threads of a benchmark.
std::map<std::string, Subject>& Subjects() {
  static auto* subjects = new std::map<std::string, Subject>;
  return *subjects;
}

void Pairs(benchmark::State& state, DeviceAllocator* alloc, const std::vector<std::size_t>* sizes) {
  const std::vector<std::size_t>& s = *sizes;
  // Warm: every size once, so the cache holds what the loop needs.
  for (std::size_t size : s) {
    absl::StatusOr<DevicePtr> p = alloc->Allocate(size, kDefaultStream);
    if (!p.ok()) {
      state.SkipWithError("allocation failed while warming up");
      return;
    }
    alloc->Free(*p);
  }
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * 17;
  for (auto _ : state) {
    absl::StatusOr<DevicePtr> p = alloc->Allocate(s[i++ % kSizes], kDefaultStream);
    benchmark::DoNotOptimize(p);
    alloc->Free(*p);
  }
  state.SetItemsProcessed(state.iterations());
}

// Keeps ns per pair by benchmark name, to print ratios after the run.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (!r.error_occurred) {
        real_[r.benchmark_name()] = r.GetAdjustedRealTime();
        cpu_[r.benchmark_name()] = r.GetAdjustedCPUTime();
      }
    }
  }
  // Single-threaded: CPU time, which a busy machine does not inflate. Several threads:
  // wall time per pair per thread, since waiting for the lock is part of the cost.
  double ns(const std::string& name, bool threaded) const {
    const auto& m = threaded ? real_ : cpu_;
    auto it = m.find(name);
    return it == m.end() ? -1 : it->second;
  }

 private:
  std::map<std::string, double> real_;
  std::map<std::string, double> cpu_;
};

}  // namespace
}  // namespace gpumem

int main(int argc, char** argv) {
  using namespace gpumem;
  benchmark::Initialize(&argc, argv);
  std::optional<bool> thread_cache;
  if (const char* v = std::getenv("GPUMEM_THREAD_CACHE"); v != nullptr && *v != '\0') {
    if (std::string(v) != "0" && std::string(v) != "1") {
      std::fprintf(stderr, "GPUMEM_THREAD_CACHE='%s': expected 0 or 1\n", v);
      return 2;
    }
    thread_cache = std::string(v) == "1";
  }
  static const std::vector<std::size_t> small = Sizes(512, kMiB);
  static const std::vector<std::size_t> large = Sizes(2 * kMiB, 256 * kMiB);
  const std::vector<std::string> policies = {"gpumem", "pytorch"};
  std::vector<std::string> ran;
  for (const std::string& policy : policies) {
    bool known = true;
    for (const char* range : {"small", "large"}) {
      Subject subject;
      subject.backend = std::make_unique<SimBackend>(SimBackendOptions{});
      absl::StatusOr<std::unique_ptr<DeviceAllocator>> a = MakePolicy(policy, *subject.backend);
      if (policy == "gpumem" && thread_cache.has_value()) {
        CachingAllocatorOptions options;
        options.thread_cache = *thread_cache;
        a = MakeCachingAllocator(*subject.backend, options);
      }
      if (!a.ok()) {
        std::printf("skipping policy %s: %s\n", policy.c_str(), std::string(a.status().message()).c_str());
        known = false;
        break;
      }
      subject.allocator = std::move(*a);
      DeviceAllocator* alloc = subject.allocator.get();
      Subjects()[policy + "/" + range] = std::move(subject);
      const std::vector<std::size_t>* sizes = std::string(range) == "small" ? &small : &large;
      for (int threads : {1, 8}) {
        benchmark::RegisterBenchmark((policy + "/" + range + "_pair").c_str(), Pairs, alloc, sizes)
            ->Threads(threads)
            ->UseRealTime();
      }
    }
    if (known) ran.push_back(policy);
  }
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  std::printf("\nns per alloc+free pair (x1: CPU time; x8: wall time per pair per thread)\n");
  std::printf("%-22s %12s %12s %10s\n", "benchmark", "gpumem", "pytorch", "ratio");
  for (const char* range : {"small", "large"}) {
    for (int threads : {1, 8}) {
      const std::string suffix = std::string("/") + range + "_pair/real_time/threads:" + std::to_string(threads);
      const double g = reporter.ns("gpumem" + suffix, threads > 1);
      const double p = reporter.ns("pytorch" + suffix, threads > 1);
      const std::string label = std::string(range) + " x" + std::to_string(threads);
      if (g < 0) continue;
      if (p < 0) {
        std::printf("%-22s %12.1f %12s %10s\n", label.c_str(), g, "n/a", "n/a");
      } else {
        std::printf("%-22s %12.1f %12.1f %10.2f\n", label.c_str(), g, p, g / p);
      }
    }
  }
  std::printf("goal: small x1 <= 50 ns, large x1 <= 200 ns\n");
  if (thread_cache.has_value()) {
    std::printf("gpumem thread caches: %s\n", *thread_cache ? "on" : "off");
  }
  Subjects().clear();
  benchmark::Shutdown();
  return 0;
}
