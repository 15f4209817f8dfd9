#include "tools/trace/pickle_nesting.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gpumem::trace {
namespace {

enum class Visit : std::uint8_t { kNew, kOnPath, kDone };

struct Frame {
  PickleId id;
  std::size_t next = 0;  // the next item to visit
};

}  // namespace

std::optional<NestingFault> CheckNesting(const PickleTree& tree, PickleId root,
                                         std::size_t max_depth) {
  std::vector<Visit> visit(tree.size(), Visit::kNew);
  // Levels of containers below and including each finished node (scalars: 0).
  std::vector<std::uint32_t> height(tree.size(), 0);
  std::vector<Frame> path;
  auto enter = [&](PickleId id) -> std::optional<NestingFault> {
    if (tree.items(id).empty() && tree.kind(id) != PickleKind::kList &&
        tree.kind(id) != PickleKind::kTuple && tree.kind(id) != PickleKind::kDict) {
      visit[id] = Visit::kDone;
      return std::nullopt;
    }
    if (path.size() + 1 > max_depth) {
      return NestingFault{id, absl::StrCat("containers nested deeper than ", max_depth, " levels")};
    }
    visit[id] = Visit::kOnPath;
    height[id] = 1;
    path.push_back({id});
    return std::nullopt;
  };
  if (auto fault = enter(root)) return fault;
  while (!path.empty()) {
    Frame& top = path.back();
    const auto items = tree.items(top.id);
    if (top.next == items.size()) {
      visit[top.id] = Visit::kDone;
      const std::uint32_t h = height[top.id];
      path.pop_back();
      if (!path.empty()) height[path.back().id] = std::max(height[path.back().id], h + 1);
      continue;
    }
    const PickleId child = items[top.next++];
    if (visit[child] == Visit::kOnPath) continue;  // a cycle: stored, never followed
    if (visit[child] == Visit::kDone) {
      if (path.size() + height[child] > max_depth) {
        return NestingFault{child, absl::StrCat("containers nested deeper than ", max_depth, " levels")};
      }
      height[top.id] = std::max(height[top.id], height[child] + 1);
      continue;
    }
    if (auto fault = enter(child)) return fault;
  }
  return std::nullopt;
}

}  // namespace gpumem::trace
