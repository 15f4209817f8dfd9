#include "tools/report/json_report.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/report/oom_explain.h"
#include "tools/report/outside_format.h"

namespace gpumem::report {

namespace {

template <typename T>
nlohmann::json OrNull(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

std::string ClassText(OomClass c) {
  return c == OomClass::kPeak ? "a genuine peak" : OomVerdictName(c);
}

// A leak outside the allocator is said after the allocator's own, or alone.
std::string LeakVerdict(const Report& r) {
  const std::string outside = OutsideLeakPhrase(r.outside_holder);
  if (!r.leaks.suspects.empty()) {
    return absl::StrCat("leak: memory kept from step to step grows ",
                        Bytes(r.leaks.bytes_per_step), " per step, mostly at ",
                        SuspectText(r.leaks.suspects.front()),
                        outside.empty() ? "" : "; and a " + outside);
  }
  if (!outside.empty()) {
    return absl::StrCat(outside, ": ", OutsideLeakCause(r.outside_holder.library));
  }
  if (r.steps.method == StepMethod::kNone) return "no steps found, so no leak verdict";
  return "no leak: memory kept from step to step does not grow";
}

nlohmann::json FailedOutsideJson(const FailedOutside& f, const std::string& fix) {
  nlohmann::json j;
  j["call"] = f.call.call;
  j["size"] = f.call.size;
  j["error"] = f.call.error;
  j["error_name"] = f.error_name;
  j["device"] = f.call.device;
  j["time_us"] = f.call.time_us;
  j["step"] = f.step + 1;
  j["site"] = f.site;
  j["device_free"] = OrNull(f.call.device_free);
  j["allocated"] = f.allocated;
  j["reserved"] = f.reserved;
  j["idle_in_cache"] = f.idle;
  j["ended_the_run"] = f.ended_the_run;
  if (f.ended_the_run) {
    j["evidence"] = FailedOutsideEvidence(f);
    j["fix"] = fix;
  }
  return j;
}

// "; the allocator held 70.1 GiB, NCCL 2.3 GiB of 79.2 GiB" where that is known.
std::string WhoHeld(const Report& r) {
  const std::string part = OutsideVerdictPart(r.outside);
  return part.empty() ? "" : absl::StrCat("; ", part);
}

// Without its rank (SuspectsJson numbers them).
nlohmann::json SuspectJson(const trace::Trace& t, const LeakSuspect& s) {
  nlohmann::json j;
  j["site"] = s.name;
  if (!s.kept_through.empty()) j["kept_through"] = s.kept_through;
  if (s.holds_graph_pools) j["holds_graph_pools"] = true;
  if (s.keeper != Keeper::kNone) j["kept_by_library"] = KeeperKey(s.keeper);
  j["bytes_per_step"] = s.bytes_per_step;
  j["fit_r2"] = s.r2;
  j["rising_share"] = s.rising_share;
  j["first_step"] = s.first_step + 1;
  j["growth_bytes"] = s.growth_bytes;
  j["blocks_never_freed"] = s.blocks_never_freed;
  j["bytes_never_freed"] = s.bytes_never_freed;
  j["stack"] = StackNames(t, s.stack);
  return j;
}

// A leak outside the allocator, among the suspects: what the CUPTI trace shows a library
// of this process kept (no stack in the main trace).
nlohmann::json OutsideSuspectJson(const UnusualHolder& h) {
  nlohmann::json j;
  j["site"] = HolderName(h);
  j["outside_allocator"] = true;
  j["library"] = OutsideLibraryKey(h.library);
  j["bytes_per_step"] = h.growth->bytes_per_step;
  j["fit_r2"] = h.growth->r2;
  j["rising_share"] = h.growth->rising_share;
  j["growth_bytes"] = h.growth->grown;
  j["held"] = h.bytes;
  return j;
}

// The suspects ranked by growth per step, a leak outside the allocator among them.
nlohmann::json SuspectsJson(const Report& r) {
  std::vector<nlohmann::json> all;
  for (const LeakSuspect& s : r.leaks.suspects) all.push_back(SuspectJson(*r.trace, s));
  if (r.outside_holder.growth) {
    nlohmann::json outside = OutsideSuspectJson(r.outside_holder);
    auto at = std::find_if(all.begin(), all.end(), [&](const nlohmann::json& s) {
      return s["bytes_per_step"].get<double>() < r.outside_holder.growth->bytes_per_step;
    });
    all.insert(at, std::move(outside));
  }
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < all.size(); ++i) {
    all[i]["rank"] = i + 1;
    out.push_back(std::move(all[i]));
  }
  return out;
}

nlohmann::json OomJson(const OomExplanation& x) {
  nlohmann::json j;
  j["class"] = OomClassName(x.cls);
  j["recovered"] = x.recovered;
  j["ended_the_run"] = x.fatal;
  j["allocated_after"] = x.at.allocated_after;
  j["reserved_after"] = x.at.reserved_after;
  j["allocs_after"] = x.at.allocs_after;
  j["event_index"] = x.at.index;
  j["time_us"] = x.at.time_us;
  j["device"] = x.at.device;
  j["step"] = x.at.step + 1;
  if (x.first_iteration_calls > 0) j["first_iteration_calls"] = x.first_iteration_calls;
  j["request"] = x.at.request;
  j["allocated"] = x.at.allocated;
  j["reserved"] = x.at.reserved;
  j["free_cached"] = x.free_cached;
  j["largest_free_piece"] = x.at.largest_free_piece;
  j["device_free"] = x.at.device_free;
  j["capacity"] = x.capacity;
  j["capacity_source"] = x.capacity_source;
  j["leaked_bytes"] = x.leaked_bytes;
  j["evidence"] = x.evidence;
  j["fix"] = x.fix;
  if (x.replay) {
    j["gpumem_replay"] = {{"ran", x.replay->ran},
                          {"error", x.replay->error},
                          {"served_this_request", x.replay->served_past_oom},
                          {"peak_reserved", x.replay->peak_reserved}};
  }
  return j;
}

// A recording that did not finish: what the trace kept and lost (null: it finished).
nlohmann::json LossJson(const std::optional<trace::TraceLoss>& l) {
  if (!l) return nullptr;
  return {{"events_kept", l->events_kept}, {"last_event_us", l->last_event_us},
          {"file_bytes", l->file_bytes},   {"bytes_kept", l->bytes_kept},
          {"bytes_lost", l->bytes_lost},   {"data_end", l->data_end},
          {"summary", l->summary}};
}

// A ring trace (GPUMEM_TRACE_MAX): the segments kept and from when (null: not a ring).
nlohmann::json RingJson(const std::optional<trace::RingWindow>& w) {
  if (!w) return nullptr;
  return {{"first_segment", w->first_segment},
          {"last_segment", w->last_segment},
          {"max_bytes", w->max_bytes},
          {"dropped", w->dropped},
          {"start_us", w->start_us},
          {"checkpoint_blocks", w->checkpoint_blocks},
          {"checkpoint_bytes", w->checkpoint_bytes},
          {"first_step", w->first_step ? nlohmann::json(*w->first_step) : nlohmann::json(nullptr)},
          {"summary", w->summary}};
}

// Each device's peaks where the process drove several (the top-level figures are theirs
// together); null where it drove one.
nlohmann::json DevicePeaksJson(const Report& r) {
  if (r.timeline.DevicesUsed() < 2) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t d = 0; d < r.timeline.devices.size(); ++d) {
    const Timeline::DevicePeaks& p = r.timeline.devices[d];
    if (p.allocated == 0) continue;
    out.push_back({{"device", d},
                   {"peak_allocated", p.allocated},
                   {"peak_reserved", r.timeline.has_segments ? nlohmann::json(p.reserved)
                                                             : nlohmann::json(nullptr)}});
  }
  return out;
}

}  // namespace

std::string Verdict(const Report& r) {
  const std::string recovered =
      r.recovered_ooms == 0
          ? ""
          : absl::StrCat(r.recovered_ooms, " OOM", r.recovered_ooms == 1 ? "" : "s",
                         " caught and recovered from");
  if (r.fatal_failed_outside) {
    const FailedOutside& f = r.failed_outside[*r.fatal_failed_outside];
    const std::string leak = OutsideLeakPhrase(r.outside_holder);
    const std::string grew = leak.empty() ? leak : leak + "; ";
    return absl::StrCat("out of memory outside the allocator in step ", f.step + 1, ": ", grew,
                        FailedCall(f), " failed while the allocator held ",
                        Bytes(f.idle), " idle",
                        recovered.empty() ? "" : absl::StrCat(" (before it, ", recovered, ")"),
                        WhoHeld(r));
  }
  if (r.fatal_oom) {
    const OomExplanation& x = r.ooms[*r.fatal_oom];
    return absl::StrCat("out of memory ", OomWhere(x), ": ", ClassText(x.cls),
                        recovered.empty() ? "" : absl::StrCat(" (before it, ", recovered, ")"),
                        WhoHeld(r));
  }
  if (!r.ooms.empty()) {
    return absl::StrCat("the run did not die of an OOM it saw (",
                        recovered.empty() ? absl::StrCat(r.ooms.size(), " OOMs") : recovered,
                        "); ", LeakVerdict(r));
  }
  return LeakVerdict(r);
}

namespace {

nlohmann::json CachePressureJson(const Report& r) {
  using nlohmann::json;
  if (!r.cache_pressure) return nullptr;
  const CachePressure& p = *r.cache_pressure;
  return {{"peak_reserved", p.peak_reserved},
          {"peak_allocated", p.peak_allocated},
          {"ratio", p.ratio()},
          {"capacity", p.capacity},
          {"device", p.device < 0 ? json(nullptr) : json(p.device)},
          {"text", CachePressureText(p)}};
}

// The OOMs the allocator saw, and the calls outside it that failed.
void AddFailuresJson(const Report& r, nlohmann::json* out) {
  nlohmann::json ooms = nlohmann::json::array();
  for (const OomExplanation& x : r.ooms) ooms.push_back(OomJson(x));
  if (r.fatal_oom) {  // what held the device, for the OOM that ended the run only
    nlohmann::json live = nlohmann::json::array();
    for (const auto& [site, bytes] : LargestLiveAt(r.ooms[*r.fatal_oom].at, kLargestLiveListed)) {
      live.push_back({{"site", r.sites.name(site)}, {"bytes", bytes}});
    }
    ooms[*r.fatal_oom]["largest_live_sites"] = std::move(live);
  }
  (*out)["ooms"] = std::move(ooms);
  (*out)["fatal_oom"] = OrNull(r.fatal_oom);
  (*out)["recovered_ooms"] = r.recovered_ooms;
  nlohmann::json failed = nlohmann::json::array();
  for (const FailedOutside& f : r.failed_outside) {
    failed.push_back(FailedOutsideJson(f, FailedOutsideFixFor(r.outside_holder)));
  }
  (*out)["failed_allocations"] = std::move(failed);
}

// The steps at which a leak (in the allocator, or outside it) would run out, 1-based.
void AddProjectionsJson(const Report& r, nlohmann::json* out) {
  using nlohmann::json;
  (*out)["projected_oom_step"] =
      r.projected_oom_step ? json(*r.projected_oom_step + 1) : json(nullptr);
  (*out)["outside_projected_oom_step"] =
      r.outside_projected_oom_step ? json(*r.outside_projected_oom_step + 1) : json(nullptr);
  const std::int32_t leak_device = LeakDevice(r.timeline, r.leaks);
  (*out)["projected_oom_device"] =
      r.projected_oom_step && leak_device >= 0 ? json(leak_device) : json(nullptr);
}

}  // namespace

nlohmann::json ReportToJson(const Report& r) {
  using nlohmann::json;
  const trace::Trace& t = *r.trace;
  json out;
  out["source"] = t.source;
  out["format"] = t.format;
  out["events"] = t.events.size();
  out["steps"] = {{"count", r.steps.count},
                  {"method", StepMethodName(r.steps.method)},
                  {"detail", r.steps.detail},
                  {"source", r.steps.source},
                  {"ends_seen", r.steps.ends.size()}};
  out["peak_allocated"] = r.timeline.peak_allocated;
  out["peak_allocated_step"] = r.steps.StepOf(r.timeline.peak_allocated_index) + 1;
  out["peak_reserved"] = r.timeline.has_segments ? json(r.timeline.peak_reserved) : json(nullptr);
  out["capacity"] = OrNull(r.capacity);
  out["capacity_source"] = r.capacity_source;
  out["devices"] = DevicePeaksJson(r);
  out["leak_suspects"] = SuspectsJson(r);
  // Absolute site paths are shown relative to this folder; the stacks keep them whole.
  out["sites_relative_to"] = r.sites.common_dir().empty() ? json(nullptr) : json(r.sites.common_dir());
  out["leak_bytes_per_step"] = r.leaks.bytes_per_step;
  out["leak_samples_used"] = r.leaks.samples_used;
  if (!r.leaks.why_none.empty()) out["leak_note"] = r.leaks.why_none;
  AddFailuresJson(r, &out);
  out["cache_pressure"] = CachePressureJson(r);
  AddProjectionsJson(r, &out);
  out["outside_allocator"] = OutsideToJson(r.outside);
  out["verdict"] = Verdict(r);
  out["warnings"] = r.warnings;
  out["loss"] = LossJson(r.trace->loss);
  out["ring"] = RingJson(r.trace->ring);
  return out;
}

}  // namespace gpumem::report
