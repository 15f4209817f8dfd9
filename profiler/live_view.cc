#include "profiler/live_view.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "profiler/trace_format.h"
#include "tools/report/verdict_rules.h"

namespace gpumem {
namespace {

constexpr std::size_t kVerdictSites = 5;
// Stacks asked whether a site's call returned (LiveView::ReturnedLocked).
constexpr std::size_t kReturnStacks = 2000;

std::int32_t DeviceOf(std::uint64_t key) { return static_cast<std::int32_t>(key >> 32); }

}  // namespace

LiveView::LiveView(std::size_t warn_steps, SiteNamer namer, CallNamer call_namer,
                   ReturnTeller returned, KeeperTeller keeper)
    : namer_(std::move(namer)),
      call_namer_(std::move(call_namer)),
      returned_(std::move(returned)),
      keeper_(std::move(keeper)),
      warner_(warn_steps),
      warn_steps_(warn_steps) {}

void LiveView::SetCap(std::int32_t device, std::uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  devices_[device].cap = bytes;
}

std::uint64_t LiveView::Cap(std::int32_t device) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = devices_.find(device);
  return it == devices_.end() ? 0 : it->second.cap;
}

std::uint32_t LiveView::SiteOfLocked(std::uint32_t stack) {
  const auto known = site_of_stack_.find(stack);
  if (known != site_of_stack_.end()) return known->second;
  std::string name = stack == 0 ? "<no stack recorded>" : namer_(stack);
  auto [it, added] = site_ids_.try_emplace(name, static_cast<std::uint32_t>(site_names_.size()));
  if (added) site_names_.push_back(std::move(name));
  site_of_stack_[stack] = it->second;
  return it->second;
}

absl::flat_hash_map<std::uint64_t, std::uint64_t> LiveView::BySiteLocked(
    const absl::flat_hash_map<std::uint64_t, std::uint64_t>& by_stack) {
  absl::flat_hash_map<std::uint64_t, std::uint64_t> out;
  out.reserve(by_stack.size() + 1);
  for (const auto& [key, bytes] : by_stack) {
    const std::int32_t device = DeviceOf(key);
    out[LiveBlocks::Key(device, SiteOfLocked(static_cast<std::uint32_t>(key)))] += bytes;
    out[DeviceTotalKey(device)] += bytes;
  }
  return out;
}

std::string LiveView::WithdrawalLine(const LeakWarning& w, std::uint64_t step) {
  const char* unit = marked_.load(std::memory_order_relaxed) ? "step" : "pass";
  const std::string head = absl::StrCat("gpumem: leak warning withdrawn at ", unit, " ", step,
                                        ": ", site_names_[static_cast<std::uint32_t>(w.key)]);
  if (w.given_back) {
    return absl::StrCat(head, " holds less (", report::Bytes(static_cast<double>(w.live)),
                        ") than when warned of (",
                        report::Bytes(static_cast<double>(w.live_when_said)),
                        "), now that the steps are marked by ",
                        format::kStepSourceNames[better_source_],
                        ": what it grew by while they were marked by ",
                        format::kStepSourceNames[replaced_source_],
                        " was given back, not kept from step to step\n");
  }
  if (w.flat_since_switch) {
    return absl::StrCat(head, " has held no more over ", LeakWarner::kTrialMarks, " ", unit,
                        " ends once the steps were marked by ",
                        format::kStepSourceNames[better_source_],
                        " (live ", report::Bytes(static_cast<double>(w.live)),
                        "): what it grew by while they were marked by ",
                        format::kStepSourceNames[replaced_source_],
                        " came within one iteration, not from step to step\n");
  }
  return absl::StrCat(head, StoppedPhrase(w, warner_.stopped_steps(), unit, "live"));
}

std::string LiveView::WarningLine(const LeakWarning& w, std::uint64_t step, const Kept& kept) {
  const std::int32_t device = DeviceOf(w.key);
  const char* unit = marked_.load(std::memory_order_relaxed) ? "step" : "pass";
  const std::string projection =
      w.oom_step ? absl::StrCat("at this rate device ", device, " reaches its cap of ",
                                report::Bytes(static_cast<double>(devices_[device].cap)),
                                " at ", unit, " ", *w.oom_step)
                 : absl::StrCat("no cap known to project the out-of-memory ", unit);
  const std::string kept_by = report::KeptByText(kept.keeper);
  return absl::StrCat("gpumem: leak warning at ", unit, " ", step, ": ",
                      report::SiteWithCall(site_names_[static_cast<std::uint32_t>(w.key)],
                                           kept.call),
                      kept_by, kept.call.empty() && kept_by.empty() ? "" : ",",
                      GrowthPhrase(w, warn_steps_, unit),
                      report::Bytes(w.bytes_per_step), "/", unit, " (live ",
                      report::Bytes(static_cast<double>(w.live)), "); ", projection, "\n");
}

void LiveView::SampleLocked(std::uint64_t step) {
  SampleFromLocked(step, blocks_.StepLowsByKeyAndStartStep());
}

void LiveView::SampleFromLocked(
    std::uint64_t step, const absl::flat_hash_map<std::uint64_t, std::uint64_t>& lows_by_stack) {
  // What each site kept all through the step: its batch and activations come and go, and
  // are not growth even when each step's are larger than the last.
  const absl::flat_hash_map<std::uint64_t, std::uint64_t> live = BySiteLocked(lows_by_stack);
  std::vector<std::uint64_t> pinned;
  for (const auto& [key, bytes] : live) {
    if ((key & 0xFFFFFFFFu) == SiteHistory::kPinnedLow) pinned.push_back(key);
  }
  for (std::uint64_t key : pinned) {
    devices_[DeviceOf(key)].step_peak = blocks_.TakeStepPeak(DeviceOf(key));
  }
  history_.Add(step, live, pinned);
}

// A pass's lows are taken here, at its end; the rest waits for TakePassWarnings.
void LiveView::SeeUnmarkedAlloc(std::uint32_t stack) {
  std::lock_guard<std::mutex> lock(passes_mu_);
  if (marked_.load(std::memory_order_relaxed)) return;
  switch (passes_.Add(stack)) {
    case PassFinder::Seen::kNothing:
      return;
    case PassFinder::Seen::kNewAnchor:
      // A new rhythm: what was found in the old one is of another unit.
      passes_seen_ = 0;
      found_.clear();
      found_.push_back(FoundPass{0, stack, {}});
      blocks_.StepLowsByKeyAndStartStep();
      break;
    case PassFinder::Seen::kPass:
      found_.push_back(FoundPass{++passes_seen_, 0, blocks_.StepLowsByKeyAndStartStep()});
      break;
  }
  has_found_.store(true, std::memory_order_release);
}

std::string LiveView::TakePassWarnings() {
  if (!has_found_.load(std::memory_order_acquire)) return "";
  std::lock_guard<std::mutex> lock(mu_);
  return ApplyPassesLocked();
}

std::string LiveView::ApplyPassesLocked() {
  std::vector<FoundPass> found;
  {
    std::lock_guard<std::mutex> lock(passes_mu_);
    found.swap(found_);
    has_found_.store(false, std::memory_order_relaxed);
  }
  std::string lines;
  for (const FoundPass& f : found) {
    if (f.pass == 0) {
      ForgetPassSamplesLocked();
      pass_start_ = site_names_[SiteOfLocked(f.anchor)];
      continue;
    }
    SampleFromLocked(f.pass, f.lows);
    lines += WarningsLocked(f.pass);
  }
  return lines;
}

void LiveView::StepsComing() {
  std::lock_guard<std::mutex> lock(mu_);
  FirstMarkLocked();
}

void LiveView::FirstMarkLocked() {
  if (marked_.exchange(true)) return;
  bool found = false;
  {
    // Past this, no allocating thread is inside SeeUnmarkedAlloc: the step's lows are ours.
    std::lock_guard<std::mutex> lock(passes_mu_);
    found = passes_.found();
    found_.clear();
    passes_seen_ = 0;
    has_found_.store(false, std::memory_order_relaxed);
  }
  if (found) ForgetPassSamplesLocked();
}

void LiveView::ForgetPassSamplesLocked() {
  history_ = SiteHistory();
  warner_ = LeakWarner(warn_steps_);
  pass_start_.clear();
}

std::string LiveView::WarningsLocked(std::uint64_t step) {
  const std::vector<LeakWarning> due = warner_.Check(step, history_, devices_);
  if (due.empty()) return "";
  // Which call kept a growing site's blocks is read only when a warning is due.
  const BlocksNow blocks = ReadBlocks();
  std::string lines;
  for (const LeakWarning& w : due) {
    if (w.withdrawn) {
      absl::StrAppend(&lines, WithdrawalLine(w, step));
      continue;
    }
    absl::StrAppend(&lines, WarningLine(w, step, KeptLocked(w.key, blocks)));
  }
  return lines;
}

std::string LiveView::OnStep(std::uint64_t step, std::uint8_t source) {
  std::lock_guard<std::mutex> lock(mu_);
  FirstMarkLocked();
  SampleLocked(step);
  std::string lines;
  const bool switched = BetterSourceLocked(source);
  for (const LeakWarning& w : warner_.WithdrawSinceBetterSource(step, history_, switched)) {
    absl::StrAppend(&lines, WithdrawalLine(w, step));
  }
  // Calls whose graphs wait for a first backward pass may all be one iteration: what
  // they hold grows from one to the next and says nothing of a leak yet.
  if (source_ != static_cast<std::uint8_t>(format::StepSource::kModelCallAwaitingBackward)) {
    awaiting_marks_ = 0;
    return lines + WarningsLocked(step);
  }
  ++awaiting_marks_;
  return lines;
}

bool LiveView::BetterSourceLocked(std::uint8_t source) {
  if (source >= format::kStepSourceNames.size()) return false;
  const bool better = source != 0 && source_ != 0 && source < source_;
  if (better) {
    replaced_source_ = source_;
    better_source_ = source;
  }
  source_ = source;
  return better;
}

LiveView::BlocksNow LiveView::ReadBlocks() const {
  return BlocksNow{blocks_.ByKey(), blocks_.FreedKeys(), blocks_.PoolKeys(),
                   blocks_.AllocStepsByKey()};
}

bool LiveView::OfSiteLocked(std::uint64_t key, std::uint64_t site_key) {
  return DeviceOf(key) == DeviceOf(site_key) &&
         SiteOfLocked(static_cast<std::uint32_t>(key)) == static_cast<std::uint32_t>(site_key);
}

std::optional<std::uint64_t> LiveView::KeptStackLocked(std::uint64_t site_key,
                                                       const BlocksNow& blocks) {
  std::uint64_t kept = 0, most = 0;
  for (const auto& [key, bytes] : blocks.by_stack) {
    if (bytes > most && OfSiteLocked(key, site_key)) std::tie(kept, most) = std::pair(key, bytes);
  }
  if (most == 0) return std::nullopt;
  return kept;
}

LiveView::Kept LiveView::KeptLocked(std::uint64_t site_key, const BlocksNow& blocks) {
  const std::optional<std::uint64_t> stack = KeptStackLocked(site_key, blocks);
  if (!stack) return {};
  return Kept{KeptThroughLocked(site_key, *stack, blocks),
              keeper_ ? keeper_(static_cast<std::uint32_t>(*stack)) : report::Keeper::kNone};
}

std::string LiveView::KeptThroughLocked(std::uint64_t site_key, std::uint64_t kept,
                                        const BlocksNow& blocks) {
  if (!call_namer_) return "";
  const auto of_site = [&](std::uint64_t key) { return OfSiteLocked(key, site_key); };
  // The call apart from any other of the site's stacks that freed (the smallest key, so
  // that the answer does not depend on the hash order). Where nothing tells the kept
  // blocks apart (no other stack of the site freed, or the kept one frees too), and for a
  // graph pool (kept by whatever keeps its graph), the caller of the site's function if
  // its call returned while they stayed (a helper's output, a capture's graph).
  const auto caller_if_returned = [&] {
    return ReturnedLocked(kept, blocks) ? call_namer_(static_cast<std::uint32_t>(kept), 0)
                                        : std::string();
  };
  if (blocks.pool_keys.contains(kept) || blocks.freed.contains(kept)) {
    return caller_if_returned();
  }
  std::optional<std::uint64_t> other;
  for (std::uint64_t key : blocks.freed) {
    if (of_site(key) && (!other || key < *other)) other = key;
  }
  if (!other) return caller_if_returned();
  const std::string apart =
      call_namer_(static_cast<std::uint32_t>(kept), static_cast<std::uint32_t>(*other));
  return apart.empty() ? caller_if_returned() : apart;
}

bool LiveView::ReturnedLocked(std::uint64_t kept, const BlocksNow& blocks) {
  const auto since = blocks.alloc_steps.find(kept);
  if (!returned_ || since == blocks.alloc_steps.end()) return false;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> later;  // (last step, stack)
  for (const auto& [key, steps] : blocks.alloc_steps) {
    if (key != kept && DeviceOf(key) == DeviceOf(kept) && steps.last > since->second.first) {
      later.emplace_back(steps.last, static_cast<std::uint32_t>(key));
    }
  }
  // The stacks that tell are those of every step (the loop's next batch): the most recent
  // suffice, and naming native frames costs a lookup each, so at most kReturnStacks.
  if (later.size() > kReturnStacks) {
    std::nth_element(later.begin(), later.begin() + kReturnStacks, later.end(),
                     std::greater<>());
    later.resize(kReturnStacks);
  }
  std::vector<std::uint32_t> stacks;
  stacks.reserve(later.size());
  for (const auto& [last, stack] : later) stacks.push_back(stack);
  return returned_(static_cast<std::uint32_t>(kept), stacks);
}

void LiveView::Describe(std::int32_t device, OomVerdictInput* in) {
  std::lock_guard<std::mutex> lock(mu_);
  in->sites_recorded = true;
  ApplyPassesLocked();  // their warnings are old news beside the verdict
  std::uint64_t passes = 0;
  {
    std::lock_guard<std::mutex> passes_lock(passes_mu_);
    passes = passes_seen_;
  }
  if (!marked_.load(std::memory_order_relaxed) && passes > 0) {
    in->figures.finished_steps = passes;
    in->pass_start = pass_start_;
  }
  const BlocksNow blocks = ReadBlocks();
  const absl::flat_hash_map<std::uint64_t, std::uint64_t> now = BySiteLocked(blocks.by_stack);
  absl::flat_hash_set<std::uint64_t> pool_sites;
  for (std::uint64_t key : blocks.pool_keys) {
    pool_sites.insert(LiveBlocks::Key(DeviceOf(key), SiteOfLocked(static_cast<std::uint32_t>(key))));
  }
  const double min_growth = report::MinLeakGrowth(in->figures.allocated);
  std::vector<VerdictSite> growing, others;
  for (const auto& [key, bytes] : now) {
    if (DeviceOf(key) != device || (key & 0xFFFFFFFFu) == SiteHistory::kPinnedLow) continue;
    VerdictSite site{site_names_[static_cast<std::uint32_t>(key)], bytes, 0,
                     pool_sites.contains(key)};
    if (const std::optional<SiteHistory::FoundGrowth> g = history_.GrowthOf(key, min_growth)) {
      site.bytes_per_step = g->growth.bytes_per_step;
      in->growth_per_step += g->growth.bytes_per_step;
      in->growth_steps = std::max(in->growth_steps, g->step_ends);
      if (bytes > g->live_then) in->figures.grown_bytes += bytes - g->live_then;
      Kept kept = KeptLocked(key, blocks);
      site.name = report::SiteWithCall(site.name, kept.call);
      site.keeper = kept.keeper;
      if (report::RequestedByGrower(in->request_keeper, site.keeper)) {
        in->figures.request_from_grower = true;
      }
      growing.push_back(std::move(site));
    } else {
      others.push_back(std::move(site));
    }
  }
  in->figures.growth_suspected = !growing.empty();
  std::sort(growing.begin(), growing.end(), [](const VerdictSite& a, const VerdictSite& b) {
    return a.bytes_per_step > b.bytes_per_step;
  });
  std::sort(others.begin(), others.end(),
            [](const VerdictSite& a, const VerdictSite& b) { return a.live > b.live; });
  for (VerdictSite& s : others) growing.push_back(std::move(s));
  if (growing.size() > kVerdictSites) growing.resize(kVerdictSites);
  in->sites = std::move(growing);
  if (source_ == static_cast<std::uint8_t>(format::StepSource::kModelCallAwaitingBackward)) {
    CountAsFirstIteration(awaiting_marks_ + 1, in);  // the first call marks nothing
  }
  DescribeHelperKeptLocked(device, in);
}

void LiveView::DescribeHelperKeptLocked(std::int32_t device, OomVerdictInput* in) {
  absl::flat_hash_map<std::uint32_t, report::HelperKept> by_site;
  for (const auto& [key, kept] : blocks_.HelperKeptByKey()) {
    if (DeviceOf(key) != device) continue;
    report::HelperKept& site = by_site[SiteOfLocked(static_cast<std::uint32_t>(key))];
    // The site's latest block is its stacks' latest.
    site.loop_bytes_since_last = site.blocks == 0 ? kept.loop_bytes_since_last
                                                  : std::min(site.loop_bytes_since_last,
                                                             kept.loop_bytes_since_last);
    site.bytes += kept.bytes;
    site.blocks += kept.blocks;
    site.main_allocs = std::max(site.main_allocs, kept.main_allocs);
    site.first_size_blocks += kept.first_size_blocks;
  }
  for (const auto& [site, kept] : by_site) {
    if (!report::KeptByHelper(kept) || kept.bytes <= in->figures.helper_kept_bytes) continue;
    in->figures.helper_kept_bytes = kept.bytes;
    in->helper_blocks = kept.blocks;
    in->helper_site = site_names_[site];
  }
}

std::uint64_t DeviceTotalKey(std::int32_t device) {
  return LiveBlocks::Key(device, static_cast<std::uint32_t>(SiteHistory::kPinnedLow));
}

void DescribeTotalGrowth(const SiteHistory& history, std::int32_t device,
                         std::uint64_t allocated_now, OomVerdictInput* in) {
  const std::optional<SiteHistory::FoundGrowth> g =
      history.GrowthOf(DeviceTotalKey(device), report::MinLeakGrowth(allocated_now));
  if (!g) return;
  in->figures.growth_suspected = true;
  in->growth_per_step = g->growth.bytes_per_step;
  in->growth_steps = g->step_ends;
  if (allocated_now > g->live_then) in->figures.grown_bytes = allocated_now - g->live_then;
}

}  // namespace gpumem
