#include "tools/report/timeline.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "tools/report/call_returns.h"
#include "tools/report/helper_threads.h"
#include "tools/report/live_state.h"

namespace gpumem::report {
namespace {

using trace::Action;

// Per-site samples cost sites x samples: past kMaxSamples step ends, sample every k-th
// (the fit needs the trend, not every step), and every one of the last kDenseTail: a leak
// that began a hundred steps before the OOM of a 30,000-step run is what killed it, and
// a sample every 30 steps would give it three points.
constexpr std::size_t kMaxSamples = 1000;
constexpr std::size_t kDenseTail = 1000;
// Live bytes by site are kept for the first OOMs and the latest (the one a run died of
// is among them); those between give theirs up, so a run that catches thousands stays
// bounded.
constexpr std::size_t kFirstOomsWithSites = 50;
constexpr std::size_t kLatestOomsWithSites = 50;

class TimelineBuilder {
 public:
  TimelineBuilder(const trace::Trace& trace, const SiteTable& sites, const Steps& steps,
                  std::size_t points)
      : trace_(trace), sites_(sites), steps_(steps), state_(sites), helpers_(trace, sites),
        pool_marks_(FindGraphPoolMarks(trace)) {
    const std::size_t n = trace.events.size();
    t_.events = n;
    t_.sites.resize(sites.size());
    t_.site_samples.resize(sites.size());
    t_.step_peak_allocated.assign(std::max<std::size_t>(steps.count, 1) + 1, 0);
    first_alloc_.assign(trace.stacks.size(), kNoAlloc);
    last_alloc_.assign(trace.stacks.size(), kNoAlloc);
    bucket_ = std::max<std::size_t>(1, (n + points - 1) / std::max<std::size_t>(points, 1));
    sample_stride_ = std::max<std::size_t>(1, (steps.ends.size() + kMaxSamples - 1) / kMaxSamples);
  }

  Timeline Build(const Progress& progress) {
    const std::size_t n = trace_.events.size();
    if (n == 0) return std::move(t_);
    t_.first_time_us = trace_.events.front().time_us;
    t_.last_time_us = trace_.events.back().time_us;
    for (std::size_t i = 0; i < n; ++i) {
      while (next_end_ < steps_.ends.size() && steps_.ends[next_end_] == i) EndStep();
      ApplyPoolMarks(i);
      Apply(i);
      if (progress && (i & 0xfffff) == 0) progress(static_cast<double>(i) / n);
    }
    // Steps ending after the last event (a marker as the final record) still count.
    ApplyPoolMarks(n);
    while (next_end_ < steps_.ends.size()) EndStep();
    Finish();
    if (progress) progress(1.0);
    return std::move(t_);
  }

 private:
  void Apply(std::size_t i) {
    const trace::Event& e = trace_.events[i];
    if (e.action == Action::kOom) {
      NoteOom(i, e);
    } else {
      layout_unchanged_ = false;
    }
    state_.Apply(e);
    if (e.action == Action::kAlloc) NoteAlloc(i, e);
    if (e.action == Action::kFreeRequested) helpers_.OnFree(e);
    t_.peak_reserved = std::max(t_.peak_reserved, state_.reserved());
    if (Timeline::DevicePeaks* d = Device(e.device)) {
      d->reserved = std::max(d->reserved, state_.reserved_on(e.device));
    }
    AddToSeries(i, e);
  }

  void ApplyPoolMarks(std::size_t before_event) {
    for (; next_mark_ < pool_marks_.size() && pool_marks_[next_mark_].before_event <= before_event;
         ++next_mark_) {
      state_.ApplyPoolMark(pool_marks_[next_mark_]);
      layout_unchanged_ = false;
    }
  }

  void EndStep() {
    if (next_end_ + 1 == steps_.ends.size()) NoteLeakedStacks();
    SettleOoms(true);
    if (next_end_ % sample_stride_ == 0 || next_end_ + kDenseTail >= steps_.ends.size()) {
      TakeSample();
    }
    ++next_end_;
    ++step_;
    state_.ResetLows();
  }

  // A site's sample is the least it held during the step that ends here: what it kept
  // all through the step. A batch, its output and its activations (live at the
  // optimizer's step hook, and larger every step in a length warm-up) come and go within
  // a step; a leak does not, even one that replaces a block by a larger one every step
  // (a history grown with torch.cat).
  void TakeSample() {
    t_.sample_step.push_back(step_);
    t_.sample_allocated.push_back(state_.allocated());
    const std::vector<std::uint64_t>& low = state_.site_low();
    for (std::size_t s = 0; s < low.size(); ++s) t_.site_samples[s].push_back(low[s]);
  }

  void NoteOom(std::size_t i, const trace::Event& e) {
    OomPoint oom;
    oom.index = i;
    oom.time_us = e.time_us;
    oom.device = e.device;
    oom.step = step_;
    oom.request = e.size;
    oom.request_keeper = KeeperOfStack(trace_, e.stack_id);
    oom.allocated = state_.allocated_on(e.device);
    oom.reserved = state_.reserved_on(e.device);
    oom.device_free = e.device_free;
    oom.headroom = e.addr;
    oom.allocs_after = t_.allocs;  // made relative in Finish()
    TakeLayout(&oom);
    if (const std::optional<HelperSite> helper = helpers_.Kept(e.device)) {
      oom.helper_site = sites_.name(helper->site);
      oom.helper_kept = helper->kept;
    }
    t_.ooms.push_back(std::move(oom));
    ForgetSitesBetweenFirstAndLatest();
  }

  // The free pieces and live bytes by site at the OOM. A storm of OOMs with nothing
  // allocated or freed between them (cuDNN trying smaller workspaces) walks the blocks once.
  void TakeLayout(OomPoint* oom) {
    if (layout_unchanged_ && !t_.ooms.empty() && t_.ooms.back().device == oom->device) {
      const OomPoint& last = t_.ooms.back();
      oom->largest_free_piece = last.largest_free_piece;
      oom->free_in_segments = last.free_in_segments;
      oom->site_live = last.site_live;
      oom->site_live_on_device = last.site_live_on_device;
      return;
    }
    const FreePieces free = state_.FreePiecesOn(oom->device);
    oom->largest_free_piece = free.largest;
    oom->free_in_segments = free.total;
    oom->site_live = state_.site_live();
    oom->site_live_on_device = state_.SiteLiveOn(oom->device);
    layout_unchanged_ = true;
  }

  void ForgetSitesBetweenFirstAndLatest() {
    const std::size_t n = t_.ooms.size();
    if (n <= kFirstOomsWithSites + kLatestOomsWithSites) return;
    OomPoint& between = t_.ooms[n - 1 - kLatestOomsWithSites];
    std::vector<std::uint64_t>().swap(between.site_live);
    std::vector<std::uint64_t>().swap(between.site_live_on_device);
  }

  // OOMs since the last step end get the state now: what they left behind.
  void SettleOoms(bool at_step_end) {
    for (; settled_ < t_.ooms.size(); ++settled_) {
      OomPoint& oom = t_.ooms[settled_];
      oom.allocated_after = state_.allocated_on(oom.device);
      oom.reserved_after = state_.reserved_on(oom.device);
      oom.after_is_step_end = at_step_end;
    }
  }

  void NoteAlloc(std::size_t i, const trace::Event& e) {
    ++t_.allocs;
    for (; allocated_after_ < t_.ooms.size(); ++allocated_after_) {
      t_.ooms[allocated_after_].first_alloc_after = i;
    }
    helpers_.OnAlloc(e);
    if (e.stack_id < first_alloc_.size()) {
      if (first_alloc_[e.stack_id] == kNoAlloc) first_alloc_[e.stack_id] = i;
      last_alloc_[e.stack_id] = i;
    }
    const std::uint32_t id = sites_.site_of_stack(e.stack_id);
    SiteTotals& site = t_.sites[id];
    if (site.allocs++ == 0) site.first_event = i;
    site.peak_live = std::max(site.peak_live, state_.site_live()[id]);
    if (state_.allocated() > t_.peak_allocated) {
      t_.peak_allocated = state_.allocated();
      t_.peak_allocated_index = i;
    }
    std::uint64_t& step_peak = t_.step_peak_allocated[std::min(step_, t_.step_peak_allocated.size() - 1)];
    step_peak = std::max(step_peak, state_.allocated());
    if (Timeline::DevicePeaks* d = Device(e.device)) {
      d->allocated = std::max(d->allocated, state_.allocated_on(e.device));
      if (d->step_allocated.empty()) d->step_allocated.assign(t_.step_peak_allocated.size(), 0);
      std::uint64_t& peak = d->step_allocated[std::min(step_, d->step_allocated.size() - 1)];
      peak = std::max(peak, state_.allocated_on(e.device));
    }
  }

  // Null for pinned host memory (device -1) and devices out of range.
  Timeline::DevicePeaks* Device(std::int32_t device) {
    if (device < 0 || device > 255) return nullptr;
    if (t_.devices.size() <= static_cast<std::size_t>(device)) t_.devices.resize(device + 1);
    return &t_.devices[device];
  }

  void AddToSeries(std::size_t i, const trace::Event& e) {
    point_.allocated_max = std::max(point_.allocated_max, state_.allocated());
    point_.reserved_max = std::max(point_.reserved_max, state_.reserved());
    if ((i + 1) % bucket_ != 0 && i + 1 != trace_.events.size()) return;
    point_.index = i;
    point_.time_us = e.time_us;
    point_.allocated_end = state_.allocated();
    point_.reserved_end = state_.reserved();
    t_.series.push_back(point_);
    point_ = SeriesPoint{};
  }

  // Each site's stack holding most of its live bytes at the last step end (what the
  // leak analysis measures; by the trace's end a process may have freed everything).
  void NoteLeakedStacks() {
    noted_leaked_ = true;
    absl::flat_hash_map<std::uint32_t, std::uint64_t> by_stack;
    for (const auto& [key, block] : state_.blocks()) by_stack[block.stack] += block.size;
    std::vector<std::uint64_t> best_bytes(t_.sites.size(), 0);
    for (const auto& [stack, bytes] : by_stack) {
      const std::uint32_t s = sites_.site_of_stack(stack);
      std::uint32_t& best = t_.sites[s].leaked_stack;
      if (bytes > best_bytes[s] || (bytes == best_bytes[s] && stack < best)) {
        best = stack;
        best_bytes[s] = bytes;
      }
    }
    absl::flat_hash_map<std::uint32_t, std::uint32_t> pool_stack_of_site;
    for (const std::uint64_t stack : state_.PoolStacks()) {
      const auto id = static_cast<std::uint32_t>(stack);
      pool_stack_of_site.try_emplace(sites_.site_of_stack(id), id);
    }
    for (std::uint32_t s = 0; s < t_.sites.size(); ++s) NoteKeptThrough(s, pool_stack_of_site);
  }

  // `pool_stack_of_site`: the sites that hold graph pools, each with a pool's first stack.
  void NoteKeptThrough(std::uint32_t s,
                       const absl::flat_hash_map<std::uint32_t, std::uint32_t>& pool_stack_of_site) {
    SiteTotals& site = t_.sites[s];
    const std::uint32_t freed = state_.site_freed_stack()[s];
    std::optional<std::uint32_t> call;
    if (site.leaked_stack != 0 && freed != 0 && freed != site.leaked_stack) {
      call = CallApart(trace_, site.leaked_stack, freed);
    }
    // A graph pool is kept by whatever keeps its graph: where the capture was called
    // from, if that call returned (else the capturing function keeps it).
    if (auto pool = pool_stack_of_site.find(s); pool != pool_stack_of_site.end()) {
      site.holds_graph_pools = true;
      if (!call && Returned(pool->second)) call = CallApart(trace_, pool->second, 0);
    }
    // Nothing told apart: the caller of the site's function, where its call returned
    // while the blocks stayed (a training step's output, a memoized encoder's).
    if (!call && site.leaked_stack != 0 && Returned(site.leaked_stack)) {
      call = CallApart(trace_, site.leaked_stack, 0);
    }
    if (call) site.kept_through = sites_.Label(trace_.frames[*call]);
  }

  // Whether the call that `stack` came down to its site returned while its blocks stayed:
  // a stack allocated since its first block shows it (CallReturns).
  bool Returned(std::uint32_t stack) {
    if (stack >= first_alloc_.size() || first_alloc_[stack] == kNoAlloc) return false;
    if (!call_returns_) {
      call_returns_.emplace();
      for (std::uint32_t s = 0; s < last_alloc_.size(); ++s) {
        if (last_alloc_[s] != kNoAlloc) call_returns_->Add(UserPath(s), last_alloc_[s]);
      }
    }
    return call_returns_->Returned(UserPath(stack), first_alloc_[stack]);
  }

  // A stack's user frames, outermost first.
  std::vector<UserFrame> UserPath(std::uint32_t stack) {
    std::vector<UserFrame> path;
    const std::vector<std::uint32_t>& frames = trace_.stacks[stack];
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
      const trace::Frame& f = trace_.frames[*it];
      if (!IsLibraryFrame(f)) path.push_back(user_frame_ids_.Of(f.filename, f.line, f.function));
    }
    return path;
  }

  void Finish() {
    SettleOoms(false);
    for (OomPoint& oom : t_.ooms) oom.allocs_after = t_.allocs - oom.allocs_after;
    for (const auto& [key, block] : state_.blocks()) {
      t_.sites[block.site].live_blocks_at_end++;
      t_.sites[block.site].live_bytes_at_end += block.size;
    }
    if (!noted_leaked_) NoteLeakedStacks();
    NoteSiteDevices();
    t_.has_segments = state_.saw_segments();
    t_.unmatched_frees = state_.unmatched_frees();
    t_.reused_addresses = state_.reused_addresses();
  }

  // Where several devices allocated: each site's device, the one holding most of its bytes
  // at the end (device 0 where it holds none).
  void NoteSiteDevices() {
    if (t_.DevicesUsed() < 2) return;
    t_.site_device.assign(t_.sites.size(), 0);
    std::vector<std::uint64_t> most(t_.sites.size(), 0);
    for (std::size_t d = 0; d < t_.devices.size(); ++d) {
      const std::vector<std::uint64_t> live = state_.SiteLiveOn(static_cast<int>(d));
      for (std::size_t s = 0; s < live.size() && s < most.size(); ++s) {
        if (live[s] > most[s]) {
          most[s] = live[s];
          t_.site_device[s] = static_cast<std::int32_t>(d);
        }
      }
    }
  }

  const trace::Trace& trace_;
  const SiteTable& sites_;
  const Steps& steps_;
  LiveState state_;
  HelperThreads helpers_;
  Timeline t_;
  std::size_t bucket_ = 1;
  std::size_t sample_stride_ = 1;
  std::vector<GraphPoolMark> pool_marks_;
  std::size_t next_mark_ = 0;
  bool layout_unchanged_ = false;  // nothing allocated or freed since the last OOM's layout
  std::size_t next_end_ = 0;  // index into steps.ends
  std::size_t step_ = 0;
  std::size_t settled_ = 0;   // OOMs whose after-state is known
  std::size_t allocated_after_ = 0;  // OOMs whose first allocation after them is known
  bool noted_leaked_ = false;
  SeriesPoint point_;
  // Each stack's first and last allocation (event index), for Returned.
  static constexpr std::uint64_t kNoAlloc = ~std::uint64_t{0};
  std::vector<std::uint64_t> first_alloc_;
  std::vector<std::uint64_t> last_alloc_;
  std::optional<CallReturns> call_returns_;  // built at the first question
  UserFrameIds user_frame_ids_;
};

}  // namespace

std::uint64_t Timeline::StepPeak(std::int32_t device, std::size_t step) const {
  if (device < 0) {
    return step_peak_allocated.empty() ? 0 : step_peak_allocated[std::min(step, step_peak_allocated.size() - 1)];
  }
  if (static_cast<std::size_t>(device) >= devices.size()) return 0;
  const std::vector<std::uint64_t>& peaks = devices[device].step_allocated;
  return peaks.empty() ? 0 : peaks[std::min(step, peaks.size() - 1)];
}

std::size_t Timeline::DevicesUsed() const {
  return static_cast<std::size_t>(
      std::count_if(devices.begin(), devices.end(), [](const DevicePeaks& d) { return d.allocated > 0; }));
}

Timeline BuildTimeline(const trace::Trace& trace, const SiteTable& sites, const Steps& steps,
                       std::size_t points, const Progress& progress) {
  return TimelineBuilder(trace, sites, steps, points).Build(progress);
}

}  // namespace gpumem::report
