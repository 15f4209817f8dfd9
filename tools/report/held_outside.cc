#include "tools/report/held_outside.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "tools/report/failed_outside.h"
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

// A library's allocations from one site (SiteTable's; 0 for no Python frames), or all of a
// known library's (kAllSites).
using HoldingKey = std::pair<OutsideLibrary, std::uint32_t>;
constexpr std::uint32_t kAllSites = ~std::uint32_t{0};

struct OutsideCall {
  const trace::Event* event;
  OutsideLibrary library;  // of an allocation; kUnknown for a free
};

// The CUPTI trace's device allocations by libraries outside the allocator on `device` (the
// ones whose native frames name them) and its frees there, in time order.
std::vector<OutsideCall> OutsideCalls(const trace::Trace& cupti, int device) {
  std::vector<OutsideCall> calls;
  for (const trace::Event& e : cupti.events) {
    if (e.device != device) continue;
    if (e.action == trace::Action::kSegmentFree) {
      calls.push_back({&e, OutsideLibrary::kUnknown});
      continue;
    }
    if (e.action != trace::Action::kSegmentAlloc || !IsDriverCall(cupti, e.stack_id)) continue;
    const OutsideLibrary library = LibraryOfStack(cupti, e.stack_id);
    if (library == OutsideLibrary::kUnknown || library == OutsideLibrary::kAllocator) continue;
    calls.push_back({&e, library});
  }
  std::stable_sort(calls.begin(), calls.end(), [](const OutsideCall& a, const OutsideCall& b) {
    return a.event->time_us < b.event->time_us;
  });
  return calls;
}

// What each library held from each site at the moment, and at each step end before it.
struct Holdings {
  absl::flat_hash_map<HoldingKey, std::uint64_t> now;
  absl::flat_hash_map<HoldingKey, std::vector<std::uint64_t>> at_ends;  // [key][end]
  std::size_t ends = 0;
};

Holdings CollectHoldings(const trace::Trace& main, const trace::Trace& cupti,
                         const SiteTable& sites, const Steps& steps, int device,
                         std::int64_t time_us) {
  const std::int64_t shift = CuptiShiftUs(main, cupti);
  const std::vector<std::int64_t> ends = StepEndTimes(main, steps, time_us);
  Holdings h;
  h.ends = ends.size();
  absl::flat_hash_map<std::uint64_t, std::pair<HoldingKey, std::uint64_t>> live;  // by addr
  std::size_t next_end = 0;
  auto sample_until = [&](std::int64_t t) {
    for (; next_end < ends.size() && ends[next_end] < t; ++next_end) {
      for (const auto& [key, bytes] : h.now) {
        std::vector<std::uint64_t>& samples = h.at_ends[key];
        samples.resize(next_end + 1, 0);
        samples[next_end] = bytes;
      }
    }
  };
  for (const OutsideCall& call : OutsideCalls(cupti, device)) {
    const trace::Event* e = call.event;
    if (e->time_us + shift > time_us) break;
    sample_until(e->time_us + shift);
    if (e->action == trace::Action::kSegmentFree) {
      if (auto it = live.find(e->addr); it != live.end()) {
        const auto& [key, bytes] = it->second;
        h.now[key] -= bytes;
        if (key.first != OutsideLibrary::kOther) h.now[{key.first, kAllSites}] -= bytes;
        live.erase(it);
      }
      continue;
    }
    const HoldingKey key{call.library, sites.site_of_stack(e->stack_id)};
    live[e->addr] = {key, e->size};
    h.now[key] += e->size;
    if (call.library != OutsideLibrary::kOther) h.now[{call.library, kAllSites}] += e->size;
  }
  sample_until(time_us + 1);
  return h;
}

std::optional<Growth> GrowthOf(Holdings& h, const HoldingKey& key) {
  std::vector<std::uint64_t>& samples = h.at_ends[key];
  samples.resize(h.ends, 0);
  std::vector<double> step_numbers(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) step_numbers[i] = static_cast<double>(i);
  return SteadyGrowth(step_numbers, samples, MinLeakGrowth(h.now[key]));
}

// Whether the site names a line of the user's: not a library's own thread (NCCL's proxy).
bool NamesAUserLine(const trace::Trace& cupti, const SiteTable& sites, std::uint32_t site) {
  return site != 0 && site != kAllSites && !IsLibraryFrame(cupti.frames[sites.frame(site)]);
}

// The unusual libraries' line holding most.
void TakeTopUnusual(const trace::Trace& cupti, const SiteTable& sites, const Holdings& h,
                    UnusualHolder* holder) {
  std::optional<HoldingKey> top;
  for (const auto& [key, bytes] : h.now) {
    if (key.first != OutsideLibrary::kOther || !NamesAUserLine(cupti, sites, key.second) ||
        bytes == 0) {
      continue;
    }
    // Ties go to the site seen first, whatever the map's order.
    if (bytes > holder->bytes || (bytes == holder->bytes && key < *top)) {
      top = key;
      holder->bytes = bytes;
    }
  }
  if (top) holder->site = sites.name(top->second);
}

// The fastest-growing of `keys` (ties to the first), with its growth.
std::optional<HoldingKey> Fastest(Holdings& h, const std::vector<HoldingKey>& keys,
                                  std::optional<Growth>* growth) {
  std::optional<HoldingKey> fastest;
  for (const HoldingKey& key : keys) {
    std::optional<Growth> g = GrowthOf(h, key);
    if (g && (!*growth || g->bytes_per_step > (*growth)->bytes_per_step)) {
      *growth = g;
      fastest = key;
    }
  }
  return fastest;
}

std::vector<HoldingKey> SortedKeys(const Holdings& h) {
  std::vector<HoldingKey> keys;
  for (const auto& entry : h.now) keys.push_back(entry.first);
  std::sort(keys.begin(), keys.end());  // ties go to the first, whatever the map's order
  return keys;
}

// What grew fastest over the step ends, if anything did, as `holder`: an unusual library's
// line, or a known library's memory as a whole (NCCL's own threads allocate for the line
// that made a communicator), named by its fastest-growing user line where it has one.
bool TakeFastestGrowing(const trace::Trace& cupti, const SiteTable& sites, Holdings& h,
                        UnusualHolder* holder) {
  std::vector<HoldingKey> candidates;
  for (const HoldingKey& key : SortedKeys(h)) {
    const bool unusual = key.first == OutsideLibrary::kOther;
    if (unusual ? NamesAUserLine(cupti, sites, key.second) : key.second == kAllSites) {
      candidates.push_back(key);
    }
  }
  const std::optional<HoldingKey> fastest = Fastest(h, candidates, &holder->growth);
  if (!fastest) return false;
  holder->library = fastest->first;
  holder->bytes = h.now[*fastest];
  if (fastest->second != kAllSites) {
    holder->site = sites.name(fastest->second);
    return true;
  }
  std::vector<HoldingKey> lines;
  for (const HoldingKey& key : SortedKeys(h)) {
    if (key.first == fastest->first && NamesAUserLine(cupti, sites, key.second)) {
      lines.push_back(key);
    }
  }
  std::optional<Growth> line_growth;
  if (const std::optional<HoldingKey> line = Fastest(h, lines, &line_growth)) {
    holder->site = sites.name(line->second);
  }
  return true;
}

}  // namespace

UnusualHolder FindUnusualHolder(const trace::Trace& main, const trace::Trace& cupti,
                                const Steps& steps, int device, std::int64_t time_us) {
  const SiteTable sites(cupti);
  Holdings h = CollectHoldings(main, cupti, sites, steps, device, time_us);
  UnusualHolder holder;
  holder.samples = h.ends;
  if (!TakeFastestGrowing(cupti, sites, h, &holder)) TakeTopUnusual(cupti, sites, h, &holder);
  return holder;
}

std::string HolderName(const UnusualHolder& holder) {
  return OutsideHolderName(holder.library, holder.site);
}

std::string OutsideLeakPhrase(const UnusualHolder& holder) {
  if (!holder.growth) return "";
  const bool unusual = holder.library == OutsideLibrary::kOther;
  return absl::StrCat("leak outside the allocator", unusual ? " at " : ": ", HolderName(holder),
                      " (+", Bytes(holder.growth->bytes_per_step), "/step)");
}

std::string FailedOutsideFixFor(const UnusualHolder& holder) {
  return holder.growth ? OutsideLeakFix(holder.library) : FailedOutsideFix();
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
  // A known library's memory counts against the run only where it grew.
  const bool known_grew = holder.growth && holder.library != OutsideLibrary::kOther;
  f.held_outside = OtherProcessesBytes(at_oom) + UnusualLibraryBytes(at_oom) +
                   (known_grew ? holder.bytes : 0);
  f.headroom = x->at.headroom;
  if (!HeldOutsideExplains(f)) return;
  if (holder.growth) {
    x->cls = OomClass::kLeak;
    x->evidence = OutsideLeakText(HolderName(holder), holder.growth->bytes_per_step,
                                  holder.samples - holder.growth->from, holder.bytes, f) +
                  ".";
    x->fix = OutsideLeakFix(holder.library);
    return;
  }
  x->cls = OomClass::kHeldOutside;
  x->evidence = HeldOutsideText(f, Holders(at_oom, holder.site)) + ".";
  x->fix = HeldOutsideFix(OtherProcessesBytes(at_oom), UnusualLibraryBytes(at_oom));
}

}  // namespace gpumem::report
