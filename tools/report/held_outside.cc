#include "tools/report/held_outside.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "tools/report/outside_changes.h"
#include "tools/report/outside_library.h"
#include "tools/report/sites.h"

namespace gpumem::report {
namespace {

std::uint64_t OtherProcessesBytes(const OutsideMoment& m) {
  if (!m.processes || !m.processes->at_moment) return 0;
  return m.processes->note.processes.others_bytes();
}

std::uint64_t UnusualLibraryBytes(const OutsideMoment& m) {
  return m.by_library[static_cast<std::size_t>(OutsideLibrary::kOther)];
}

// Who held it, as HeldOutsideHolders says it.
std::string Holders(const OutsideMoment& m, const std::string& library_site) {
  const std::uint64_t others = OtherProcessesBytes(m);
  const std::string named = others > 0 ? ProcessesText(m.processes->note.processes.others) : "";
  return HeldOutsideHolders(others, named, UnusualLibraryBytes(m), library_site);
}

// The times at which steps ended, up to `until`: the state after events [0, end).
std::vector<std::int64_t> StepEndTimes(const trace::Trace& main, const Steps& steps,
                                       std::int64_t until) {
  std::vector<std::int64_t> times;
  for (const std::size_t end : steps.ends) {
    if (end == 0 || end > main.events.size()) continue;
    const std::int64_t t = main.events[end - 1].time_us;
    if (t <= until) times.push_back(t);
  }
  return times;
}

// The CUPTI trace's device allocations by unusual libraries on `device`, in time order.
std::vector<const trace::Event*> UnusualCalls(const trace::Trace& cupti, int device) {
  std::vector<const trace::Event*> calls;
  for (const trace::Event& e : cupti.events) {
    if (e.device != device) continue;
    const bool alloc = e.action == trace::Action::kSegmentAlloc;
    if (!alloc && e.action != trace::Action::kSegmentFree) continue;
    if (alloc && (!IsDriverCall(cupti, e.stack_id) ||
                  LibraryOfStack(cupti, e.stack_id) != OutsideLibrary::kOther)) {
      continue;
    }
    calls.push_back(&e);
  }
  std::stable_sort(calls.begin(), calls.end(), [](const trace::Event* a, const trace::Event* b) {
    return a->time_us < b->time_us;
  });
  return calls;
}

}  // namespace

UnusualHolder FindUnusualHolder(const trace::Trace& main, const trace::Trace& cupti,
                                const Steps& steps, int device, std::int64_t time_us) {
  const std::int64_t shift = CuptiShiftUs(main, cupti);
  const std::vector<std::int64_t> ends = StepEndTimes(main, steps, time_us);
  const SiteTable sites(cupti);
  absl::flat_hash_map<std::uint64_t, std::pair<std::uint32_t, std::uint64_t>> live;  // addr
  absl::flat_hash_map<std::uint32_t, std::uint64_t> by_site;
  absl::flat_hash_map<std::uint32_t, std::vector<std::uint64_t>> at_ends;  // [site][end]
  std::size_t next_end = 0;
  auto sample_until = [&](std::int64_t t) {
    for (; next_end < ends.size() && ends[next_end] < t; ++next_end) {
      for (const auto& [site, bytes] : by_site) {
        std::vector<std::uint64_t>& samples = at_ends[site];
        samples.resize(next_end + 1, 0);
        samples[next_end] = bytes;
      }
    }
  };
  for (const trace::Event* e : UnusualCalls(cupti, device)) {
    if (e->time_us + shift > time_us) break;
    sample_until(e->time_us + shift);
    if (e->action == trace::Action::kSegmentFree) {
      if (auto it = live.find(e->addr); it != live.end()) {
        by_site[it->second.first] -= it->second.second;
        live.erase(it);
      }
      continue;
    }
    const std::uint32_t site = sites.site_of_stack(e->stack_id);
    live[e->addr] = {site, e->size};
    by_site[site] += e->size;
  }
  sample_until(time_us + 1);
  UnusualHolder holder;
  holder.samples = ends.size();
  std::uint32_t top = 0;
  for (const auto& [site, bytes] : by_site) {
    if (site != 0 && bytes > holder.bytes) {
      top = site;
      holder.bytes = bytes;
    }
  }
  if (top == 0) return holder;
  holder.site = sites.name(top);
  std::vector<std::uint64_t>& samples = at_ends[top];
  samples.resize(ends.size(), 0);
  std::vector<double> step_numbers(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) step_numbers[i] = static_cast<double>(i);
  holder.growth = SteadyGrowth(step_numbers, samples, MinLeakGrowth(holder.bytes));
  return holder;
}

std::string OutsideLeakPhrase(const UnusualHolder& holder) {
  if (!holder.growth) return "";
  return absl::StrCat("leak outside the allocator at ", holder.site, " (+",
                      Bytes(holder.growth->bytes_per_step), "/step)");
}

std::optional<std::size_t> ProjectOutsideOomStep(const UnusualHolder& holder,
                                                 const OutsideMoment& end,
                                                 std::size_t steps_done) {
  if (!holder.growth || holder.growth->bytes_per_step <= 0 || !end.driver_total ||
      !end.driver_used || steps_done == 0) {
    return std::nullopt;
  }
  const double free =
      static_cast<double>(*end.driver_total - std::min(*end.driver_total, *end.driver_used));
  return steps_done - 1 +
         static_cast<std::size_t>(std::ceil(free / holder.growth->bytes_per_step));
}

void ExplainHeldOutside(const OutsideMoment& at_oom, const UnusualHolder& holder,
                        OomExplanation* x) {
  if (x->cls == OomClass::kLeak) return;
  OomFigures f;
  f.allocated = x->at.allocated;
  f.request = x->at.request;
  f.capacity = x->capacity;
  f.capacity_known = x->capacity_known;
  if (x->at.device_free != 0) f.device_free = x->at.device_free;
  f.held_outside = OtherProcessesBytes(at_oom) + UnusualLibraryBytes(at_oom);
  f.headroom = x->at.headroom;
  if (!HeldOutsideExplains(f)) return;
  if (holder.growth) {
    x->cls = OomClass::kLeak;
    x->evidence = OutsideLeakText(holder.site, holder.growth->bytes_per_step,
                                  holder.samples - holder.growth->from, holder.bytes, f) +
                  ".";
    x->fix = kOutsideLeakFix;
    return;
  }
  x->cls = OomClass::kHeldOutside;
  x->evidence = HeldOutsideText(f, Holders(at_oom, holder.site)) + ".";
  x->fix = OomFix(OomClass::kHeldOutside);
}

}  // namespace gpumem::report
