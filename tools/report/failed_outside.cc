#include "tools/report/failed_outside.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "allocator/emulation/pytorch_sizes.h"
#include "tools/report/oom_fate.h"
#include "tools/report/outside_changes.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::report {
namespace {

// Events at or before `time_us`: the failure's place among the events.
std::size_t EventsBefore(const trace::Trace& trace, std::int64_t time_us) {
  auto it = std::upper_bound(trace.events.begin(), trace.events.end(), time_us,
                             [](std::int64_t t, const trace::Event& e) { return t < e.time_us; });
  return static_cast<std::size_t>(it - trace.events.begin());
}

void StateBefore(const Timeline& timeline, std::int64_t time_us, FailedOutside* f) {
  for (auto it = timeline.series.rbegin(); it != timeline.series.rend(); ++it) {
    if (it->time_us > time_us) continue;
    f->allocated = it->allocated_end;
    f->reserved = it->reserved_end;
    f->idle = f->reserved > f->allocated ? f->reserved - f->allocated : 0;
    return;
  }
}

// Nothing after it that a surviving program does: a step end, an allocator OOM, or more
// allocations than an unwinding exception makes.
bool NothingSurvivedAfter(const trace::Trace& trace, const Steps& steps, std::size_t index) {
  if (steps.StepOf(trace.events.size()) > steps.StepOf(index)) return false;
  std::uint64_t allocs = 0;
  for (std::size_t i = index; i < trace.events.size(); ++i) {
    const trace::Action a = trace.events[i].action;
    if (a == trace::Action::kOom || a == trace::Action::kStep) return false;
    if (a == trace::Action::kAlloc && ++allocs >= kAllocsAfterRecovery) return false;
  }
  return true;
}

// The dying process's note (python/gpumem/_exit_oom.py) begins so, then names the
// library's error: "gpumem: this is an out-of-memory: NCCL error (...) is what ...".
constexpr absl::string_view kExitNote = "gpumem: this is an out-of-memory: ";

// The library error the dying process named, as a failure of unknown size: where CUPTI
// did not see the driver call (it was off, or the library used an API it does not trace).
std::optional<FailedOutside> LibraryErrorAtExit(const trace::Trace& trace, const Steps& steps,
                                               const Timeline& timeline) {
  for (auto it = trace.annotations.rbegin(); it != trace.annotations.rend(); ++it) {
    if (!absl::StartsWith(it->name, kExitNote)) continue;
    const absl::string_view rest = absl::string_view(it->name).substr(kExitNote.size());
    FailedOutside f;
    f.call.time_us = it->time_us;
    f.call.device = it->device;
    f.call.call = std::string(rest.substr(0, rest.find(" (")));
    f.error_name = "the library's own error, named by the dying process";
    const std::size_t before = EventsBefore(trace, it->time_us);
    f.step = steps.StepOf(before);
    StateBefore(timeline, it->time_us, &f);
    f.ended_the_run = NothingSurvivedAfter(trace, steps, before);
    return f;
  }
  return std::nullopt;
}

// PyTorch's caching allocator asks the driver for a segment, and where the driver
// refuses, frees its cache and asks again: the second call gets the segment, or the OOM
// is raised. CUPTI sees the refused calls as it sees any library's; they are the
// allocator's own: a failed call followed within the window, on its device, by a segment
// of its size or an OOM whose request (or segment, as PyTorch rounds it) is its size.
constexpr std::int64_t kOwnAttemptWindowUs = 2'000'000;

// `e` comes within the window after `call`.
bool FollowsAsItsOwn(const trace::Event& e, const trace::FailedAllocation& call) {
  if (e.device != call.device) return false;
  if (e.action == trace::Action::kSegmentAlloc) return e.size == call.size;
  return call.size == e.size ||
         call.size == emulation::AllocationSize(emulation::RoundSize(e.size));
}

// The main trace's segments and OOMs: what an allocator's own failed call leads to.
std::vector<const trace::Event*> AllocatorOutcomes(const trace::Trace& trace) {
  std::vector<const trace::Event*> out;
  for (const trace::Event& e : trace.events) {
    if (e.action == trace::Action::kOom || e.action == trace::Action::kSegmentAlloc) {
      out.push_back(&e);
    }
  }
  // Devices' events interleave by time, each in its own order: sorted for the search.
  std::stable_sort(out.begin(), out.end(), [](const trace::Event* a, const trace::Event* b) {
    return a->time_us < b->time_us;
  });
  return out;
}

bool AllocatorsOwnAttempt(const std::vector<const trace::Event*>& outcomes,
                          const trace::FailedAllocation& call) {
  auto first = std::lower_bound(
      outcomes.begin(), outcomes.end(), call.time_us,
      [](const trace::Event* e, std::int64_t t) { return e->time_us < t; });
  for (auto it = first; it != outcomes.end(); ++it) {
    if ((*it)->time_us - call.time_us > kOwnAttemptWindowUs) break;
    if (FollowsAsItsOwn(**it, call)) return true;
  }
  return false;
}

}  // namespace

std::vector<FailedOutside> ListFailedOutside(const trace::Trace& trace, const trace::Trace* cupti,
                                             const SiteTable& sites, const Steps& steps,
                                             const Timeline& timeline) {
  std::vector<FailedOutside> out;
  const std::vector<const trace::Event*> outcomes = AllocatorOutcomes(trace);
  // Each call named by the sites of the trace that holds its stack, its time on the main
  // trace's clock.
  auto add = [&](const trace::FailedAllocation& call, const SiteTable& its_sites,
                 std::size_t stacks, std::int64_t shift_us) {
    FailedOutside f;
    f.call = call;
    f.call.time_us += shift_us;
    if (AllocatorsOwnAttempt(outcomes, f.call)) return;
    f.error_name = trace::FailedCallErrorName(call);
    f.step = steps.StepOf(EventsBefore(trace, f.call.time_us));
    if (call.stack_id < stacks && call.stack_id != 0) {
      f.site = its_sites.name(its_sites.site_of_stack(call.stack_id));
    }
    StateBefore(timeline, f.call.time_us, &f);
    out.push_back(std::move(f));
  };
  for (const trace::FailedAllocation& call : trace.failed_allocations) {
    add(call, sites, trace.stacks.size(), 0);
  }
  if (cupti != nullptr && !cupti->failed_allocations.empty()) {
    const SiteTable cupti_sites(*cupti);
    const std::int64_t shift = CuptiShiftUs(trace, *cupti);
    for (const trace::FailedAllocation& call : cupti->failed_allocations) {
      add(call, cupti_sites, cupti->stacks.size(), shift);
    }
    std::stable_sort(out.begin(), out.end(), [](const FailedOutside& a, const FailedOutside& b) {
      return a.call.time_us < b.call.time_us;
    });
  }
  if (!out.empty()) {
    out.back().ended_the_run =
        NothingSurvivedAfter(trace, steps, EventsBefore(trace, out.back().call.time_us));
  }
  if (out.empty() || !out.back().ended_the_run) {
    std::optional<FailedOutside> at_exit = LibraryErrorAtExit(trace, steps, timeline);
    if (at_exit && at_exit->ended_the_run) out.push_back(std::move(*at_exit));
  }
  return out;
}

std::string FailedCall(const FailedOutside& f) {
  if (f.call.size == 0) return absl::StrCat(f.call.call, " (size not recorded)");
  return absl::StrCat(f.call.call, " of ", Bytes(f.call.size));
}

std::string DescribeFailedOutside(const FailedOutside& f) {
  return absl::StrCat(FailedCall(f), " failed (", f.error_name, ") in step ", f.step + 1,
                      f.site.empty() ? "" : absl::StrCat(" at ", f.site));
}

std::string FailedOutsideEvidence(const FailedOutside& f) {
  const std::string driver_free =
      f.call.device_free ? absl::StrCat("; the driver had ", Bytes(*f.call.device_free), " free")
                         : "";
  return absl::StrCat(
      "a library asked the driver for memory outside the allocator: ", DescribeFailedOutside(f),
      driver_free, ". The allocator held ", Bytes(f.idle), " idle in its cache then (reserved ",
      Bytes(f.reserved), ", allocated ", Bytes(f.allocated),
      "), memory the call could have had. The library reports this as its own error "
      "(CUBLAS_STATUS_ALLOC_FAILED, CUDNN_STATUS_INTERNAL_ERROR, an NCCL \"unhandled cuda "
      "error\"), which does not say memory.");
}

std::string FailedOutsideFix() {
  return "call torch.cuda.empty_cache() after catching an OOM (e.g. in a batch-size finder); "
         "create cuBLAS/cuDNN handles and NCCL communicators before filling memory (run one "
         "validation batch and one collective before a batch-size finder); leave a reserve "
         "with torch.cuda.set_per_process_memory_fraction or GPUMEM_HEADROOM; or run under "
         "gpumem's allocator (gpumem run), which gives idle memory back when such a call fails.";
}

}  // namespace gpumem::report
