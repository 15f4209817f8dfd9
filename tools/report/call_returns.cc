#include "tools/report/call_returns.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpumem::report {

UserFrame UserFrameIds::Of(absl::string_view file, int line, absl::string_view function) {
  std::string name = absl::StrCat(file, "\n", function);
  const std::uint32_t frame = Id(absl::StrCat(name, "\n", line));
  return UserFrame{frame, Id(std::move(name))};
}

std::uint32_t UserFrameIds::Id(std::string key) {
  return ids_.try_emplace(std::move(key), static_cast<std::uint32_t>(ids_.size())).first->second;
}

void CallReturns::Add(const std::vector<UserFrame>& path, std::uint64_t last_alloc) {
  std::uint32_t at = 0;
  for (const UserFrame& f : path) {
    auto [it, inserted] = nodes_[at].children.try_emplace(f.frame, 0);
    if (inserted) {
      it->second = static_cast<std::uint32_t>(nodes_.size());
      nodes_.emplace_back().function = f.function;
    }
    at = it->second;
    Node& n = nodes_[at];
    n.latest = n.any ? std::max(n.latest, last_alloc) : last_alloc;
    n.any = true;
  }
  if (at == 0) return;
  Node& end = nodes_[at];
  end.latest_ending = end.any_ending ? std::max(end.latest_ending, last_alloc) : last_alloc;
  end.any_ending = true;
}

bool CallReturns::ElsewhereAfter(const Node& parent, std::uint32_t taken, std::uint64_t since,
                                 const std::uint32_t* site_function) const {
  for (const auto& [frame, child] : parent.children) {
    const Node& c = nodes_[child];
    if (frame == taken || !c.any || c.latest <= since) continue;
    if (site_function == nullptr || c.function != *site_function) return true;
  }
  return false;
}

bool CallReturns::Returned(const std::vector<UserFrame>& path, std::uint64_t since) const {
  if (path.size() < 2) return false;
  // Below the outermost frame: another thread's stacks start elsewhere and tell nothing.
  auto first = nodes_[0].children.find(path[0].frame);
  if (first == nodes_[0].children.end()) return false;
  std::uint32_t at = first->second;
  for (std::size_t i = 1; i < path.size(); ++i) {
    const Node& caller = nodes_[at];
    if (caller.any_ending && caller.latest_ending > since) return true;
    const bool site = i + 1 == path.size();
    if (ElsewhereAfter(caller, path[i].frame, since, site ? &path[i].function : nullptr)) {
      return true;
    }
    auto next = caller.children.find(path[i].frame);
    if (next == caller.children.end()) return false;
    at = next->second;
  }
  return false;
}

}  // namespace gpumem::report
