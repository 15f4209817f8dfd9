#include "tools/report/perfetto_export.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "tools/report/live_state.h"
#include "tools/report/sites.h"

namespace gpumem::report {

nlohmann::json ExportPerfetto(const trace::Trace& t, const Steps& steps, std::size_t max_points) {
  using nlohmann::json;
  json events = json::array();
  if (t.events.empty()) return json{{"traceEvents", events}};
  const std::int64_t t0 = t.events.front().time_us;
  std::int64_t last_ts = 0;
  // Times in a trace can step back a little (events from several threads); the viewer
  // wants them in order on a track.
  auto ts = [&](std::int64_t time_us) {
    last_ts = std::max(last_ts, time_us - t0);
    return last_ts;
  };
  SiteTable sites(t);
  LiveState live(sites);
  struct Peak {
    std::uint64_t allocated = 0, reserved = 0;
    bool touched = false;
  };
  std::map<int, Peak> peaks;  // per device, within the current stretch
  const std::size_t n = t.events.size();
  const std::size_t stretch = std::max<std::size_t>(1, (n + max_points - 1) / std::max<std::size_t>(1, max_points));
  std::size_t next_step = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const trace::Event& e = t.events[i];
    while (next_step < steps.ends.size() && steps.ends[next_step] == i) {
      ++next_step;
      events.push_back({{"name", absl::StrCat("step ", next_step, " ends")}, {"ph", "i"}, {"s", "g"},
                        {"ts", ts(e.time_us)}, {"pid", 0}, {"tid", 0}});
    }
    if (e.action == trace::Action::kOom) {
      events.push_back({{"name", "OOM"}, {"ph", "i"}, {"s", "p"}, {"ts", ts(e.time_us)}, {"pid", e.device},
                        {"tid", 0},
                        {"args", {{"requested", e.size}, {"device_free", e.device_free},
                                  {"allocated", live.allocated_on(e.device)},
                                  {"reserved", live.reserved_on(e.device)}}}});
    }
    live.Apply(e);
    Peak& p = peaks[e.device];
    p.allocated = std::max(p.allocated, live.allocated_on(e.device));
    p.reserved = std::max(p.reserved, live.reserved_on(e.device));
    p.touched = true;
    if ((i + 1) % stretch == 0 || i + 1 == n) {
      for (auto& [device, peak] : peaks) {
        if (!peak.touched) continue;
        json args = {{"allocated", peak.allocated}};
        if (live.saw_segments()) args["reserved"] = peak.reserved;
        events.push_back({{"name", "memory"}, {"ph", "C"}, {"ts", ts(e.time_us)}, {"pid", device},
                          {"args", std::move(args)}});
        peak = Peak{live.allocated_on(device), live.reserved_on(device), false};
      }
    }
  }
  for (const auto& [device, peak] : peaks) {
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", device},
                      {"args", {{"name", absl::StrCat("GPU ", device, " memory")}}}});
  }
  return json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"},
              {"otherData", {{"source", t.source}, {"format", t.format}}}};
}

}  // namespace gpumem::report
