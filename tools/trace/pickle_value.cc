#include "tools/trace/pickle_value.h"

#include <limits>
#include <utility>

namespace gpumem::trace {

const char* PickleKindName(PickleKind kind) {
  switch (kind) {
    case PickleKind::kNone: return "None";
    case PickleKind::kBool: return "bool";
    case PickleKind::kInt:
    case PickleKind::kUint: return "int";
    case PickleKind::kFloat: return "float";
    case PickleKind::kString: return "str";
    case PickleKind::kBytes: return "bytes";
    case PickleKind::kList: return "list";
    case PickleKind::kTuple: return "tuple";
    case PickleKind::kDict: return "dict";
  }
  return "?";
}

std::optional<std::int64_t> PickleTree::as_int64(PickleId id) const {
  const Node& n = nodes_[id];
  if (kind(id) == PickleKind::kInt) return n.i;
  if (kind(id) == PickleKind::kBool) return static_cast<std::int64_t>(n.u);
  return std::nullopt;
}

std::optional<std::uint64_t> PickleTree::as_uint64(PickleId id) const {
  const Node& n = nodes_[id];
  if (kind(id) == PickleKind::kUint || kind(id) == PickleKind::kBool) return n.u;
  if (kind(id) == PickleKind::kInt && n.i >= 0) return static_cast<std::uint64_t>(n.i);
  return std::nullopt;
}

std::optional<PickleId> PickleTree::Find(PickleId dict, absl::string_view key) const {
  if (!is_dict(dict)) return std::nullopt;
  absl::Span<const PickleId> kv = items(dict);
  for (std::size_t i = kv.size(); i >= 2; i -= 2) {
    PickleId k = kv[i - 2];
    if (kind(k) == PickleKind::kString && as_string(k) == key) return kv[i - 1];
  }
  return std::nullopt;
}

PickleId PickleTreeBuilder::Add(PickleKind kind, std::uint64_t offset, PickleTree::Node node) {
  const auto id = static_cast<PickleId>(tree_.nodes_.size());
  while ((offset >> 32) > tree_.epochs_.size()) tree_.epochs_.push_back(id);
  node.offset_low = static_cast<std::uint32_t>(offset);
  tree_.nodes_.push_back(node);
  tree_.kinds_.push_back(kind);
  return id;
}

PickleId PickleTreeBuilder::None(std::uint64_t offset) { return Add(PickleKind::kNone, offset); }

PickleId PickleTreeBuilder::Bool(bool value, std::uint64_t offset) {
  PickleTree::Node n;
  n.u = value ? 1 : 0;
  return Add(PickleKind::kBool, offset, n);
}

PickleId PickleTreeBuilder::Int(std::int64_t value, std::uint64_t offset) {
  PickleTree::Node n;
  n.i = value;
  return Add(PickleKind::kInt, offset, n);
}

PickleId PickleTreeBuilder::Uint(std::uint64_t value, std::uint64_t offset) {
  if (value <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return Int(static_cast<std::int64_t>(value), offset);
  }
  PickleTree::Node n;
  n.u = value;
  return Add(PickleKind::kUint, offset, n);
}

PickleId PickleTreeBuilder::Float(double value, std::uint64_t offset) {
  PickleTree::Node n;
  n.d = value;
  return Add(PickleKind::kFloat, offset, n);
}

PickleId PickleTreeBuilder::String(absl::string_view value, std::uint64_t offset, PickleKind kind) {
  PickleTree::Node n;
  n.u = tree_.strings_.size();
  n.len = static_cast<std::uint32_t>(value.size());
  tree_.strings_.append(value.data(), value.size());
  return Add(kind, offset, n);
}

PickleId PickleTreeBuilder::Container(PickleKind kind, std::uint64_t offset) {
  PickleTree::Node n;
  n.u = tree_.items_.size();
  return Add(kind, offset, n);
}

// A container's items stay one run at the end of items_ while nothing else is added after
// them (the common case: a dict or a batch-built list filled at once); one that grows
// again later keeps them aside until Settle.
void PickleTreeBuilder::Append(PickleId container, absl::Span<const PickleId> items) {
  if (items.empty()) return;
  PickleTree::Node& n = tree_.nodes_[container];
  std::vector<PickleId>& all = tree_.items_;
  if (auto it = scattered_.find(container); it != scattered_.end()) {
    it->second.insert(it->second.end(), items.begin(), items.end());
  } else if (n.len == 0 || n.u + n.len == all.size()) {
    if (n.len == 0) n.u = all.size();
    all.insert(all.end(), items.begin(), items.end());
  } else {
    std::vector<PickleId>& aside = scattered_[container];
    aside.assign(all.begin() + static_cast<std::ptrdiff_t>(n.u),
                 all.begin() + static_cast<std::ptrdiff_t>(n.u + n.len));
    aside.insert(aside.end(), items.begin(), items.end());
  }
  n.len += static_cast<std::uint32_t>(items.size());
}

void PickleTreeBuilder::Settle() {
  for (auto& [container, items] : scattered_) {
    PickleTree::Node& n = tree_.nodes_[container];
    n.u = tree_.items_.size();
    tree_.items_.insert(tree_.items_.end(), items.begin(), items.end());
  }
  scattered_.clear();
}

PickleTree PickleTreeBuilder::Finish(PickleId root) && {
  Settle();
  tree_.root_ = root;
  return std::move(tree_);
}

}  // namespace gpumem::trace
