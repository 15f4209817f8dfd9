#include <algorithm>
#include <map>

#include "absl/strings/str_format.h"
#include "tools/report/html_parts.h"

namespace gpumem::report::html {
namespace {

constexpr double kPruneShare = 0.002;  // tree nodes under 0.2% of the total are merged

struct TreeNode {
  std::string name;
  bool user = false;
  std::uint64_t bytes = 0;
  std::map<std::uint32_t, TreeNode> children;  // by frame id
};

bool Kept(const TreeNode& node, double min_bytes) { return static_cast<double>(node.bytes) >= min_bytes; }

// Nodes the tree keeps when those under `min_bytes` are merged (deep stacks can keep many).
std::size_t CountKept(const TreeNode& node, double min_bytes) {
  std::size_t n = 1;
  for (const auto& [id, child] : node.children) {
    if (Kept(child, min_bytes)) n += CountKept(child, min_bytes);
  }
  return n;
}

nlohmann::json TreeToJson(const TreeNode& node, double min_bytes) {
  nlohmann::json j = {{"n", node.name}, {"v", node.bytes}, {"user", node.user}};
  std::vector<const TreeNode*> kids;
  std::uint64_t small = 0;
  for (const auto& [id, child] : node.children) {
    if (Kept(child, min_bytes)) {
      kids.push_back(&child);
    } else {
      small += child.bytes;
    }
  }
  std::sort(kids.begin(), kids.end(), [](const TreeNode* a, const TreeNode* b) { return a->bytes > b->bytes; });
  nlohmann::json children = nlohmann::json::array();
  for (const TreeNode* k : kids) children.push_back(TreeToJson(*k, min_bytes));
  if (small > 0) children.push_back({{"n", "(smaller)"}, {"v", small}, {"user", false}});
  if (!children.empty()) j["c"] = std::move(children);
  return j;
}

TreeNode BuildTree(const Report& r, const LiveSnapshot& snap) {
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
  return root;
}

// One segment's row: its blocks, neighbours closer than `merge_gap` drawn as one (the
// free figures stay exact).
nlohmann::json SegmentRow(const LiveSnapshot::Segment& s, std::uint64_t merge_gap) {
  nlohmann::json blocks = nlohmann::json::array();
  std::uint64_t used = 0, largest_free = 0, cursor = 0;
  std::uint64_t run_begin = 0, run_end = 0;
  bool in_run = false;
  for (const auto& [off, size] : s.blocks) {
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
  if (s.size > cursor) largest_free = std::max(largest_free, s.size - cursor);
  return {{"a", absl::StrFormat("0x%x", s.addr)},
          {"s", s.size},
          {"free", s.size - std::min(used, s.size)},
          {"largest_free", largest_free},
          {"b", std::move(blocks)}};
}

}  // namespace

nlohmann::json FlameJson(const Report& r, const LiveSnapshot& snap) {
  const TreeNode root = BuildTree(r, snap);
  double min_bytes = std::max(1.0, kPruneShare * static_cast<double>(root.bytes));
  // Each doubling at least halves what one level can keep; a few rounds suffice.
  while (CountKept(root, min_bytes) > kFlameNodes) min_bytes *= 2;
  return TreeToJson(root, min_bytes);
}

nlohmann::json SegmentsJson(const LiveSnapshot& snap, bool* truncated) {
  std::vector<const LiveSnapshot::Segment*> segs;
  for (const LiveSnapshot::Segment& s : snap.segments) segs.push_back(&s);
  std::sort(segs.begin(), segs.end(), [](auto* a, auto* b) { return a->size > b->size; });
  *truncated = segs.size() > kSegments;
  if (*truncated) segs.resize(kSegments);
  const std::size_t per_segment = kSegmentBlocks / std::max<std::size_t>(segs.size(), 1);
  nlohmann::json out = nlohmann::json::array();
  for (const LiveSnapshot::Segment* s : segs) {
    // A row drawn about 1000 pixels wide shows no more than per_segment blocks anyway.
    const std::uint64_t merge_gap = s->blocks.size() > per_segment ? s->size / per_segment : 0;
    out.push_back(SegmentRow(*s, merge_gap));
  }
  return out;
}

}  // namespace gpumem::report::html
