#include "tools/report/html_report.h"

#include <algorithm>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "tools/report/detail.h"
#include "tools/report/json_report.h"
#include "tools/report/merge.h"

namespace gpumem::report {
namespace {

constexpr std::size_t kMaxStepMarks = 1000;
constexpr std::size_t kMaxSegments = 300;
constexpr std::size_t kMaxBlocksPerSegment = 2000;
constexpr double kPruneShare = 0.002;  // tree nodes under 0.2% of the total are merged

// Event numbers by default: a run's idle stretches (start-up, data loading) would
// squeeze the steps into a corner on a time axis. Seconds when asked for.
struct XAxis {
  bool by_time = false;
  std::int64_t t0 = 0;
  double operator()(std::size_t index, std::int64_t time_us) const {
    return by_time ? static_cast<double>(time_us - t0) / 1e6 : static_cast<double>(index);
  }
};

struct TreeNode {
  std::string name;
  bool user = false;
  std::uint64_t bytes = 0;
  std::map<std::uint32_t, TreeNode> children;  // by frame id
};

nlohmann::json TreeToJson(const TreeNode& node, std::uint64_t total) {
  nlohmann::json j = {{"n", node.name}, {"v", node.bytes}, {"user", node.user}};
  std::vector<const TreeNode*> kids;
  std::uint64_t small = 0;
  for (const auto& [id, child] : node.children) {
    if (static_cast<double>(child.bytes) < kPruneShare * static_cast<double>(total)) {
      small += child.bytes;
    } else {
      kids.push_back(&child);
    }
  }
  std::sort(kids.begin(), kids.end(), [](const TreeNode* a, const TreeNode* b) { return a->bytes > b->bytes; });
  nlohmann::json children = nlohmann::json::array();
  for (const TreeNode* k : kids) children.push_back(TreeToJson(*k, total));
  if (small > 0) children.push_back({{"n", "(smaller)"}, {"v", small}, {"user", false}});
  if (!children.empty()) j["c"] = std::move(children);
  return j;
}

nlohmann::json Flame(const Report& r, const LiveSnapshot& snap) {
  const trace::Trace& t = *r.trace;
  TreeNode root{"all live memory", false, 0, {}};
  for (const auto& [stack, bytes] : snap.bytes_by_stack) {
    root.bytes += bytes;
    TreeNode* node = &root;
    const std::vector<std::uint32_t>& frames = t.stacks[stack];
    if (frames.empty()) {
      TreeNode& n = node->children[UINT32_MAX];
      n.name = "<no Python frames>";
      n.bytes += bytes;
      continue;
    }
    for (auto f = frames.rbegin(); f != frames.rend(); ++f) {  // outermost first
      TreeNode& n = node->children[*f];
      if (n.name.empty()) {
        n.name = FrameName(t.frames[*f]);
        n.user = !IsLibraryFrame(t.frames[*f]);
      }
      n.bytes += bytes;
      node = &n;
    }
  }
  return TreeToJson(root, root.bytes);
}

nlohmann::json Segments(const LiveSnapshot& snap, bool* truncated) {
  std::vector<const LiveSnapshot::Segment*> segs;
  for (const LiveSnapshot::Segment& s : snap.segments) segs.push_back(&s);
  std::sort(segs.begin(), segs.end(), [](auto* a, auto* b) { return a->size > b->size; });
  *truncated = segs.size() > kMaxSegments;
  if (*truncated) segs.resize(kMaxSegments);
  nlohmann::json out = nlohmann::json::array();
  for (const LiveSnapshot::Segment* s : segs) {
    nlohmann::json blocks = nlohmann::json::array();
    std::uint64_t used = 0, largest_free = 0, cursor = 0;
    // Past the cap, neighbouring blocks are drawn as one (the free pieces stay exact).
    const std::uint64_t merge_gap = s->blocks.size() > kMaxBlocksPerSegment ? s->size / kMaxBlocksPerSegment : 0;
    std::uint64_t run_begin = 0, run_end = 0;
    bool in_run = false;
    for (const auto& [off, size] : s->blocks) {
      used += size;
      if (off > cursor) largest_free = std::max(largest_free, off - cursor);
      cursor = std::max(cursor, off + size);
      if (in_run && off <= run_end + merge_gap) {
        run_end = std::max(run_end, off + size);
      } else {
        if (in_run) blocks.push_back({run_begin, run_end - run_begin});
        run_begin = off;
        run_end = off + size;
        in_run = true;
      }
    }
    if (in_run) blocks.push_back({run_begin, run_end - run_begin});
    if (s->size > cursor) largest_free = std::max(largest_free, s->size - cursor);
    out.push_back({{"a", absl::StrFormat("0x%x", s->addr)},
                   {"s", s->size},
                   {"free", s->size - std::min(used, s->size)},
                   {"largest_free", largest_free},
                   {"b", std::move(blocks)}});
  }
  return out;
}

}  // namespace

nlohmann::json HtmlData(const Report& r) {
  const trace::Trace& t = *r.trace;
  const Timeline& tl = r.timeline;
  Detail detail = BuildDetail(r);
  XAxis x;
  x.by_time = false;
  x.t0 = t.events.empty() ? 0 : t.events.front().time_us;
  nlohmann::json series;
  series["x_label"] = x.by_time ? "seconds" : "event number";
  std::vector<double> xs;
  std::vector<std::uint64_t> allocated, reserved;
  for (const SeriesPoint& p : tl.series) {
    xs.push_back(x(p.index, p.time_us));
    allocated.push_back(p.allocated_max);
    reserved.push_back(p.reserved_max);
  }
  series["x"] = xs;
  series["allocated"] = allocated;
  series["reserved"] = tl.has_segments ? nlohmann::json(reserved) : nlohmann::json(nullptr);
  nlohmann::json stacks = nlohmann::json::array();
  for (std::size_t k = 0; k < detail.top_sites.size(); ++k) {
    stacks.push_back({{"site", r.sites.name(detail.top_sites[k])}, {"values", detail.site_series[k]}});
  }
  nlohmann::json marks = nlohmann::json::array();
  const std::size_t stride = std::max<std::size_t>(1, r.steps.ends.size() / kMaxStepMarks);
  for (std::size_t i = 0; i < r.steps.ends.size(); i += stride) {
    const std::size_t e = std::min(r.steps.ends[i], t.events.size() - 1);
    marks.push_back(x(e, t.events[e].time_us));
  }
  nlohmann::json ooms = nlohmann::json::array();
  for (std::size_t i = 0; i < r.ooms.size() && i < 50; ++i) {
    ooms.push_back({{"x", x(r.ooms[i].at.index, r.ooms[i].at.time_us)}, {"cls", OomClassName(r.ooms[i].cls)}});
  }
  nlohmann::json out;
  out["json"] = ReportToJson(r);
  out["series"] = std::move(series);
  out["stacks"] = std::move(stacks);
  out["step_marks"] = std::move(marks);
  out["oom_marks"] = std::move(ooms);
  out["flame_peak"] = detail.at_peak ? Flame(r, *detail.at_peak) : nlohmann::json(nullptr);
  out["flame_oom"] = detail.at_oom ? Flame(r, *detail.at_oom) : nlohmann::json(nullptr);
  bool truncated = false;
  out["segments_peak"] = detail.at_peak ? Segments(*detail.at_peak, &truncated) : nlohmann::json::array();
  out["segments_truncated"] = truncated;
  return out;
}

std::string RenderHtml(const std::vector<Report>& reports) {
  nlohmann::json data;
  data["reports"] = nlohmann::json::array();
  for (const Report& r : reports) data["reports"].push_back(HtmlData(r));
  if (reports.size() > 1) data["merged"] = MergedToJson(MergeRanks(reports));
  // Inside <script>, "</" could end the element early; JSON allows "<\/" instead.
  const std::string text = absl::StrReplaceAll(data.dump(), {{"</", "<\\/"}});
  return absl::StrReplaceAll(kReportHtmlTemplate, {{"/*GPUMEM_DATA*/", text}});
}

}  // namespace gpumem::report
