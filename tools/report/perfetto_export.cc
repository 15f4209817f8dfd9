#include "tools/report/perfetto_export.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "tools/report/live_state.h"
#include "tools/report/sites.h"

namespace gpumem::report {

namespace {

using nlohmann::json;

// The Chrome trace-event JSON of one trace, event by event: step marks, OOMs, and a memory
// counter per device holding the peaks of each stretch of events.
class PerfettoBuilder {
 public:
  PerfettoBuilder(const trace::Trace& t, const Steps& steps)
      : steps_(steps), t0_(t.events.front().time_us), sites_(t), live_(sites_) {}

  void Add(std::size_t i, const trace::Event& e) {
    for (; next_step_ < steps_.ends.size() && steps_.ends[next_step_] == i; ++next_step_) {
      events_.push_back({{"name", absl::StrCat("step ", next_step_ + 1, " ends")},
                         {"ph", "i"}, {"s", "g"}, {"ts", Ts(e.time_us)}, {"pid", 0}, {"tid", 0}});
    }
    if (e.action == trace::Action::kOom) AddOom(e);
    live_.Apply(e);
    Peak& p = peaks_[e.device];
    p.allocated = std::max(p.allocated, live_.allocated_on(e.device));
    p.reserved = std::max(p.reserved, live_.reserved_on(e.device));
    p.touched = true;
  }

  // One counter sample per device touched since the last: the stretch's peaks.
  void EndStretch(std::int64_t time_us) {
    for (auto& [device, peak] : peaks_) {
      if (!peak.touched) continue;
      json args = {{"allocated", peak.allocated}};
      if (live_.saw_segments()) args["reserved"] = peak.reserved;
      events_.push_back({{"name", "memory"}, {"ph", "C"}, {"ts", Ts(time_us)}, {"pid", device},
                         {"args", std::move(args)}});
      peak = Peak{live_.allocated_on(device), live_.reserved_on(device), false};
    }
  }

  json Finish(const trace::Trace& t) {
    for (const auto& [device, peak] : peaks_) {
      events_.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", device},
                         {"args", {{"name", absl::StrCat("GPU ", device, " memory")}}}});
    }
    return json{{"traceEvents", std::move(events_)}, {"displayTimeUnit", "ms"},
                {"otherData", {{"source", t.source}, {"format", t.format}}}};
  }

 private:
  struct Peak {
    std::uint64_t allocated = 0, reserved = 0;
    bool touched = false;
  };

  // Times in a trace can step back a little (events from several threads); the viewer
  // wants them in order on a track.
  std::int64_t Ts(std::int64_t time_us) {
    last_ts_ = std::max(last_ts_, time_us - t0_);
    return last_ts_;
  }

  void AddOom(const trace::Event& e) {
    events_.push_back({{"name", "OOM"}, {"ph", "i"}, {"s", "p"}, {"ts", Ts(e.time_us)},
                       {"pid", e.device}, {"tid", 0},
                       {"args", {{"requested", e.size}, {"device_free", e.device_free},
                                 {"allocated", live_.allocated_on(e.device)},
                                 {"reserved", live_.reserved_on(e.device)}}}});
  }

  const Steps& steps_;
  const std::int64_t t0_;
  std::int64_t last_ts_ = 0;
  std::size_t next_step_ = 0;
  SiteTable sites_;
  LiveState live_;
  std::map<int, Peak> peaks_;  // per device, within the current stretch
  json events_ = json::array();
};

}  // namespace

nlohmann::json ExportPerfetto(const trace::Trace& t, const Steps& steps, std::size_t max_points) {
  if (t.events.empty()) return json{{"traceEvents", json::array()}};
  PerfettoBuilder builder(t, steps);
  const std::size_t n = t.events.size();
  const std::size_t stretch =
      std::max<std::size_t>(1, (n + max_points - 1) / std::max<std::size_t>(1, max_points));
  for (std::size_t i = 0; i < n; ++i) {
    builder.Add(i, t.events[i]);
    if ((i + 1) % stretch == 0 || i + 1 == n) builder.EndStretch(t.events[i].time_us);
  }
  return builder.Finish(t);
}

}  // namespace gpumem::report
