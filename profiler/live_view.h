// The recorder's in-process view of live memory by site and by step: LiveBlocks counts
// each allocation and free, and at each step mark the sites' live bytes go into a bounded
// SiteHistory, the early leak warning is checked (LeakWarner), and an OOM is described
// from both (OomVerdictInput). Sites are named as the report names them: the innermost
// frame outside library code. Until a step is marked, passes found in the allocations
// (PassFinder) stand in for steps, the warnings and the verdict counting per pass; the
// first step marked drops what they measured.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "profiler/leak_warning.h"
#include "profiler/live_blocks.h"
#include "profiler/oom_verdict.h"
#include "profiler/pass_finder.h"
#include "profiler/site_history.h"

namespace gpumem {

class LiveView {
 public:
  // The site of a stack id ("file:line function").
  using SiteNamer = std::function<std::string(std::uint32_t stack)>;
  // The call (a frame, named as sites are) through which the first stack came where the
  // second, of the same site, came another way; empty if none (report::CallApart).
  using CallNamer = std::function<std::string(std::uint32_t kept, std::uint32_t other)>;
  // Whether any of `later` (stacks that allocated after `kept`'s first block) shows that
  // the call `kept` came down to its site returned (report::CallReturns).
  using ReturnTeller =
      std::function<bool(std::uint32_t kept, const std::vector<std::uint32_t>& later)>;
  // The library whose code allocated a stack's block to keep it (report::KeeperInside).
  using KeeperTeller = std::function<report::Keeper(std::uint32_t stack)>;
  // `warn_steps`: GPUMEM_LEAK_WARN_STEPS (0: no warning). Without `call_namer` a growing
  // site is named by its site alone; without `returned`, with a call only where another
  // of its stacks tells the kept blocks apart.
  LiveView(std::size_t warn_steps, SiteNamer namer, CallNamer call_namer = nullptr,
           ReturnTeller returned = nullptr, KeeperTeller keeper = nullptr);

  void OnAlloc(std::int32_t device, std::uint64_t addr, std::uint64_t size, std::uint32_t stack,
               ThreadRole role = ThreadRole::kMain) {
    blocks_.OnAlloc(device, addr, size, stack, role);
    if (!marked_.load(std::memory_order_relaxed)) SeeUnmarkedAlloc(stack);
  }
  void OnFree(std::uint64_t addr) { blocks_.OnFree(addr); }
  void OnGraphPool(std::int32_t device, const format::GraphPoolNote& note) {
    blocks_.OnGraphPool(device, note);
  }
  void SetCap(std::int32_t device, std::uint64_t bytes);

  // Step `step` ended, marked by `source` (format::StepSource; 0: unknown): samples the
  // sites; returns the warning lines due (or ""). Where a better source than the last
  // step's marks, warnings whose site now holds less than when said are withdrawn. Calls
  // of the model awaiting a first backward pass are sampled but warn of nothing: they may
  // all be one iteration.
  std::string OnStep(std::uint64_t step, std::uint8_t source = 0);
  // The passes found since the last call (in loops nothing marks), sampled now, and the
  // warning lines they make due (or ""). Passes are found on the allocating thread, under
  // the allocator's lock, where only the pass finder and each pass's lows are taken:
  // naming sites may symbolize and a warning goes to stderr, so the recorder calls this
  // where no allocator lock is held (before the next allocation takes it).
  std::string TakePassWarnings();
  // Steps are coming from a source that has not marked yet (the micro-batches of a first
  // accumulation window, before the optimizer's first step): passes are no longer looked
  // for, as after a first mark. Its micro-batches would be taken for passes, and what
  // the window keeps until its step for a leak.
  void StepsComing();
  // Fills the sites, the growth and the step figures of an OOM on `device`.
  void Describe(std::int32_t device, OomVerdictInput* in);
  std::uint64_t Live(std::int32_t device) const { return blocks_.Live(device); }
  std::uint64_t Cap(std::int32_t device);

 private:
  // Bytes by LiveBlocks::Key(device, stack) summed by site, with device totals under
  // kPinnedLow.
  absl::flat_hash_map<std::uint64_t, std::uint64_t> BySiteLocked(
      const absl::flat_hash_map<std::uint64_t, std::uint64_t>& by_stack);
  std::uint32_t SiteOfLocked(std::uint32_t stack);
  // What the live blocks hold now, by LiveBlocks key: read once for all the sites a
  // warning or a verdict names (warnings are rare, the blocks many).
  struct BlocksNow {
    absl::flat_hash_map<std::uint64_t, std::uint64_t> by_stack;  // live bytes
    absl::flat_hash_set<std::uint64_t> freed;      // keys that have freed a block
    absl::flat_hash_set<std::uint64_t> pool_keys;  // keys that hold graph pools
    absl::flat_hash_map<std::uint64_t, LiveBlocks::AllocSteps> alloc_steps;
  };
  BlocksNow ReadBlocks() const;
  // What a growing site's kept blocks (its stack holding most of its live bytes) say:
  // the call they came through (KeptThroughLocked) and the library keeping them.
  struct Kept {
    std::string call;
    report::Keeper keeper = report::Keeper::kNone;
  };
  Kept KeptLocked(std::uint64_t site_key, const BlocksNow& blocks);
  // For a growing site (`site_key`) whose kept stack is `kept`: the call its kept blocks
  // came through, where `kept` never freed and another of its stacks did; for a graph
  // pool's, where its capture was called from (whatever keeps the graph is there); else
  // the call into the site's function, where that call returned while they stayed.
  std::string KeptThroughLocked(std::uint64_t site_key, std::uint64_t kept,
                                const BlocksNow& blocks);
  // Whether a LiveBlocks key (device and stack) is of the site `site_key` names.
  bool OfSiteLocked(std::uint64_t key, std::uint64_t site_key);
  // The key (device and stack) holding most of a site's live bytes; nullopt: none live.
  std::optional<std::uint64_t> KeptStackLocked(std::uint64_t site_key, const BlocksNow& blocks);
  // Whether the call the kept stack (a LiveBlocks key) came down returned since its
  // first block (ReturnTeller).
  bool ReturnedLocked(std::uint64_t kept, const BlocksNow& blocks);
  // The line that withdraws `w`'s warning, with why.
  std::string WithdrawalLine(const LeakWarning& w, std::uint64_t step);
  // `kept`: what the growing site's kept blocks say (KeptLocked).
  std::string WarningLine(const LeakWarning& w, std::uint64_t step, const Kept& kept);
  // The site on `device` whose helper-thread blocks explain an OOM best (KeptByHelper,
  // the most bytes), into `in`.
  void DescribeHelperKeptLocked(std::int32_t device, OomVerdictInput* in);
  // Takes each site's least live bytes since the last sample into the history.
  void SampleLocked(std::uint64_t step);
  void SampleFromLocked(std::uint64_t step,
                        const absl::flat_hash_map<std::uint64_t, std::uint64_t>& lows_by_stack);
  void SeeUnmarkedAlloc(std::uint32_t stack);
  // Samples the passes found and returns their warning lines.
  std::string ApplyPassesLocked();
  // The early warnings due at the end of step (or pass) `step`, one line each.
  std::string WarningsLocked(std::uint64_t step);
  // The first step marked: passes found before it stop counting, and their samples go.
  void FirstMarkLocked();
  // Whether `source` ranks above the last step's source (a lower StepSource value).
  bool BetterSourceLocked(std::uint8_t source);
  // Drops what passes measured (samples, warnings) before a new unit begins.
  void ForgetPassSamplesLocked();

  LiveBlocks blocks_;
  std::mutex mu_;  // everything below: step marks and OOMs may come from several threads
  SiteNamer namer_;
  CallNamer call_namer_;
  ReturnTeller returned_;
  KeeperTeller keeper_;
  SiteHistory history_;
  LeakWarner warner_;
  const std::size_t warn_steps_;
  absl::flat_hash_map<std::uint32_t, std::uint32_t> site_of_stack_;
  absl::flat_hash_map<std::string, std::uint32_t> site_ids_;
  std::vector<std::string> site_names_;
  absl::flat_hash_map<std::int32_t, LeakWarner::DeviceFigures> devices_;
  std::atomic<bool> marked_{false};  // a step was marked: passes are not looked for
  std::string pass_start_;           // the anchor's site
  std::uint8_t source_ = 0;          // what marked the last step (format::StepSource)
  std::uint8_t replaced_source_ = 0;  // what marked the steps before the last better source
  std::uint8_t better_source_ = 0;    // that better source
  std::uint64_t awaiting_marks_ = 0;  // steps marked by model calls awaiting a first backward

  // What the allocating threads find: taken after mu_ where both are, alone under the
  // allocator's lock.
  struct FoundPass {
    std::uint64_t pass = 0;     // 0: a new anchor (`anchor`), whose passes start again
    std::uint32_t anchor = 0;
    absl::flat_hash_map<std::uint64_t, std::uint64_t> lows;  // by LiveBlocks key
  };
  std::mutex passes_mu_;
  PassFinder passes_;
  std::uint64_t passes_seen_ = 0;  // since the anchor was found
  std::vector<FoundPass> found_;   // not yet sampled
  std::atomic<bool> has_found_{false};
};

// A device's key among a SiteHistory's sites for a figure of the whole device (its total
// live bytes, what its unusual libraries hold): pinned, never a site (kPinnedLow).
std::uint64_t DeviceTotalKey(std::int32_t device);

// Total live bytes of `device` at step ends (`history`'s pinned key): when they grow
// steadily, the growth figures of `in` (for a verdict without sites).
void DescribeTotalGrowth(const SiteHistory& history, std::int32_t device,
                         std::uint64_t allocated_now, OomVerdictInput* in);

}  // namespace gpumem
