// Blocks that helper threads keep, per site, as the trace is walked: the offline side of
// report::HelperKept (the dying process counts the same in profiler/live_blocks.h). The
// loop's threads are the recording process's main thread (its thread id is its pid) and,
// from their note on, the threads the Python package saw run the loop
// (profiler/package_notes.h); a thread that allocated for a backward node (a stack
// through "<autograd>") is autograd's; any other thread is a helper. Traces that do not
// say the process's pid (PyTorch snapshots, .tsv) have no helpers.
#pragma once

#include <cstdint>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "tools/report/sites.h"
#include "tools/report/verdict_rules.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

struct HelperSite {
  std::uint32_t site = 0;
  HelperKept kept;
};

class HelperThreads {
 public:
  HelperThreads(const trace::Trace& trace, const SiteTable& sites);

  // A successful allocation; a free the program made (kFreeRequested).
  void OnAlloc(const trace::Event& e);
  void OnFree(const trace::Event& e);
  // The site on `device` whose helper blocks are KeptByHelper, the one with the most bytes.
  std::optional<HelperSite> Kept(std::int32_t device) const;

 private:
  struct Held {
    std::int32_t device = 0;
    std::uint32_t site = 0;
    std::uint64_t size = 0;
  };
  struct SiteState {
    HelperKept kept;
    std::uint64_t first_main = 0;  // main allocations so far at the site's first block
    std::uint64_t first_size = 0;  // the size of the site's first block
    std::uint64_t loop_bytes_at_last = 0;  // loop_bytes_ on its device at its latest block
  };
  static std::uint64_t Key(std::int32_t device, std::uint32_t site) {
    return static_cast<std::uint64_t>(static_cast<std::uint32_t>(device)) << 32 | site;
  }
  void Forget(std::uint64_t addr);

  const SiteTable& sites_;
  // Whether `e`'s thread runs the loop when `e` is made.
  bool OnLoopThread(const trace::Event& e) const;

  std::optional<std::uint32_t> main_thread_;
  absl::flat_hash_map<std::uint32_t, std::int64_t> loop_since_us_;  // noted loop threads
  absl::flat_hash_set<std::uint32_t> backward_threads_;
  std::uint64_t main_allocs_ = 0;
  // By device: bytes the loop's and autograd's threads allocated so far.
  absl::flat_hash_map<std::int32_t, std::uint64_t> loop_bytes_;
  absl::flat_hash_map<std::uint64_t, Held> held_;          // live helper blocks by address
  absl::flat_hash_map<std::uint64_t, SiteState> by_site_;  // by Key(device, site)
};

}  // namespace gpumem::report
