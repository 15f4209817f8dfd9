#include "tools/report/merge.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gpumem::report {
namespace {

constexpr double kMiB = 1 << 20;
constexpr double kPeakApart = 0.10;  // a peak this far from the median's differs
constexpr double kPeakFloor = 64 * kMiB;  // ... and by at least this much
// Other processes' memory on a rank's GPU worth naming (a CUDA context is ~0.5 GiB; NVML
// may show another container's processes as 0 B).
constexpr std::uint64_t kOtherProcessFloor = 1 << 20;

template <typename T, typename Get>
double Median(const std::vector<T>& items, Get get) {
  std::vector<double> v;
  v.reserve(items.size());
  for (const T& x : items) v.push_back(static_cast<double>(get(x)));
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

std::string Step(std::size_t step) { return absl::StrCat("step ", step + 1); }

std::string LeakReason(const RankSummary& s, double median_leak) {
  const double apart = std::max(2 * median_leak, median_leak + kMiB);
  if (s.leak_site.empty() || s.leak_bytes_per_step < apart) return "";
  std::string why = absl::StrCat("leaks ", Bytes(s.leak_bytes_per_step), "/step at ",
                                 s.leak_site, " (median rank ", Bytes(median_leak), "/step)");
  if (s.projected_oom_step) absl::StrAppend(&why, ", out of memory at ", Step(*s.projected_oom_step));
  return why;
}

std::string PeakReason(const RankSummary& s, double median_peak) {
  const double peak = static_cast<double>(s.peak_allocated);
  if (std::abs(peak - median_peak) < std::max(kPeakApart * median_peak, kPeakFloor)) return "";
  return absl::StrFormat("peak allocated %s, %+.0f%% against the median rank's %s",
                         Bytes(peak), (peak / median_peak - 1) * 100, Bytes(median_peak));
}

// The job's processes by (host, pid): a pid NVML lists on a rank's GPU may be another rank.
using RanksByPid = absl::flat_hash_map<std::pair<std::string, std::int64_t>, std::int64_t>;

RanksByPid RanksByProcess(const std::vector<RankSummary>& ranks) {
  RanksByPid by_pid;
  for (const RankSummary& s : ranks) {
    if (s.pid && s.rank) by_pid[{s.host, *s.pid}] = *s.rank;
  }
  return by_pid;
}

// "other processes hold 1.50 GiB of its GPU: rank 1 (pid 101) 512.00 MiB, pid 777 1.00 GiB":
// another rank's CUDA context on this rank's GPU is the classic one, with its fix.
std::string OtherProcessReason(const RankSummary& s, const RanksByPid& by_pid) {
  if (!s.other_processes) return "";
  std::uint64_t total = 0;
  bool other_ranks = false;
  for (const ProcessBytes& p : *s.other_processes) {
    total += p.bytes;
    other_ranks |= by_pid.contains({s.host, p.pid});
  }
  if (total < kOtherProcessFloor) return "";
  const auto who = [&](std::uint32_t pid) {
    auto it = by_pid.find({s.host, pid});
    if (it == by_pid.end()) return PidName(pid);
    return absl::StrCat("rank ", it->second, " (pid ", pid, ")");
  };
  return absl::StrCat("other processes hold ", Bytes(static_cast<double>(total)), " of its GPU: ",
                      ProcessesText(*s.other_processes, 8, who),
                      other_ranks ? " (other ranks made a CUDA context here: each rank should call "
                                    "torch.cuda.set_device(local_rank) before its first CUDA call)"
                                  : "");
}

// Why `s` stands out among ranks with these medians; "" when it does not.
std::string Differs(const RankSummary& s, double median_leak, double median_peak,
                    bool most_ran_out, const RanksByPid& by_pid) {
  std::vector<std::string> why;
  if (std::string r = LeakReason(s, median_leak); !r.empty()) why.push_back(r);
  if (std::string r = PeakReason(s, median_peak); !r.empty()) why.push_back(r);
  if (std::string r = OtherProcessReason(s, by_pid); !r.empty()) why.push_back(r);
  if (s.ooms > 0 && !most_ran_out) {
    why.push_back(absl::StrCat(s.ooms, " out-of-memory errors, the first at ",
                               Step(*s.first_oom_step)));
  }
  if (!s.damage.empty()) why.push_back("trace damaged or cut short: " + s.damage);
  return absl::StrJoin(why, "; ");
}

void MarkDiffering(Merged* m) {
  const double median_leak = Median(m->ranks, [](const RankSummary& s) { return s.leak_bytes_per_step; });
  const double median_peak = Median(m->ranks, [](const RankSummary& s) { return s.peak_allocated; });
  const std::size_t ran_out = std::count_if(m->ranks.begin(), m->ranks.end(),
                                            [](const RankSummary& s) { return s.ooms > 0; });
  const RanksByPid by_pid = RanksByProcess(m->ranks);
  for (RankSummary& s : m->ranks) {
    s.differs = Differs(s, median_leak, median_peak, 2 * ran_out > m->ranks.size(), by_pid);
  }
}

void FindMissing(Merged* m) {
  std::int64_t world = 0;
  std::set<std::int64_t> seen;
  for (const RankSummary& s : m->ranks) {
    if (s.rank_from == "header") seen.insert(*s.rank);
    if (s.world_size) world = std::max(world, *s.world_size);
  }
  for (std::int64_t r = 0; r < world && !seen.empty(); ++r) {
    if (!seen.count(r)) m->missing_ranks.push_back(r);
  }
}

// The step a rank runs out at: an OOM it had, else its leak's projection.
std::optional<std::size_t> OutAt(const RankSummary& s) {
  return s.first_oom_step ? s.first_oom_step : s.projected_oom_step;
}

std::string FirstOut(const std::vector<RankSummary>& ranks) {
  const RankSummary* first = nullptr;
  for (const RankSummary& s : ranks) {
    if (OutAt(s) && (first == nullptr || *OutAt(s) < *OutAt(*first))) first = &s;
  }
  if (first == nullptr) return "no rank runs out of memory at these rates";
  if (first->first_oom_step) {
    return absl::StrCat("rank ", *first->rank, " runs out first: out of memory at ",
                        Step(*first->first_oom_step));
  }
  return absl::StrCat("rank ", *first->rank, " runs out first: at ",
                      Step(*first->projected_oom_step), " at its leak rate (",
                      Bytes(first->leak_bytes_per_step), "/step at ", first->leak_site, ")");
}

void SetImbalance(Merged* m) {
  std::uint64_t lowest = UINT64_MAX, highest = 0;
  const RankSummary* top = &m->ranks.front();
  for (const RankSummary& s : m->ranks) {
    lowest = std::min(lowest, s.peak_allocated);
    if (s.peak_allocated >= highest) {
      highest = s.peak_allocated;
      top = &s;
    }
  }
  for (RankSummary& s : m->ranks) {
    s.peak_vs_lowest = lowest == 0 ? 1.0 : static_cast<double>(s.peak_allocated) / lowest;
  }
  m->imbalance = lowest == 0 ? 1.0 : static_cast<double>(highest) / lowest;
  m->summary = absl::StrFormat(
      "peak allocated ranges from %s to %s (%.1f%% apart); the highest is rank %d (%s), which "
      "runs out first if memory gets tight",
      Bytes(static_cast<double>(lowest)), Bytes(static_cast<double>(highest)),
      (m->imbalance - 1) * 100, *top->rank, top->source);
}

}  // namespace

Merged MergeRanks(std::vector<RankSummary> ranks, std::vector<UnreadTrace> unread) {
  Merged m;
  m.ranks = std::move(ranks);
  m.unread = std::move(unread);
  std::stable_sort(m.ranks.begin(), m.ranks.end(),
                   [](const RankSummary& a, const RankSummary& b) { return a.rank < b.rank; });
  FindMissing(&m);
  if (m.ranks.empty()) return m;
  SetImbalance(&m);
  MarkDiffering(&m);
  m.first_out = FirstOut(m.ranks);
  return m;
}

Merged MergeRanks(const std::vector<Report>& reports) {
  std::vector<RankSummary> ranks;
  for (std::size_t i = 0; i < reports.size(); ++i) ranks.push_back(SummarizeRank(reports[i], i));
  return MergeRanks(std::move(ranks));
}

}  // namespace gpumem::report
