// The values a pickle decodes to, stored flat: every value is a node in one vector, and the
// items of every container are a run of node ids in one more (a 25M-event snapshot holds
// 50M containers: one heap vector each cost more than their items). A value the pickle reuses through its memo (BINGET) is the same
// node again, never a copy, so a snapshot that names one frame dict two million times costs
// two million ids, not two million dicts. Through the memo a pickle can share values and
// even build cycles: walk the tree by known paths (as the snapshot reader does), not by
// blind recursion.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gpumem::trace {

enum class PickleKind : std::uint8_t {
  kNone,
  kBool,
  kInt,     // fits int64
  kUint,    // above INT64_MAX, fits uint64 (device addresses can)
  kFloat,
  kString,  // str (UTF-8 bytes as stored; not validated)
  kBytes,
  kList,
  kTuple,
  kDict,    // items alternate key, value, in insertion order
};

const char* PickleKindName(PickleKind kind);

using PickleId = std::uint32_t;

class PickleTree {
 public:
  PickleId root() const { return root_; }
  std::size_t size() const { return nodes_.size(); }

  PickleKind kind(PickleId id) const { return kinds_[id]; }
  // Byte offset of the opcode that made the value: error messages point at it.
  std::uint64_t offset(PickleId id) const {
    const auto epoch = std::upper_bound(epochs_.begin(), epochs_.end(), id) - epochs_.begin();
    return std::uint64_t{static_cast<std::uint64_t>(epoch)} << 32 | nodes_[id].offset_low;
  }

  bool is_dict(PickleId id) const { return kind(id) == PickleKind::kDict; }
  bool is_sequence(PickleId id) const {  // list or tuple
    return kind(id) == PickleKind::kList || kind(id) == PickleKind::kTuple;
  }

  bool as_bool(PickleId id) const { return nodes_[id].u != 0; }
  double as_float(PickleId id) const { return nodes_[id].d; }
  // Integers (and bools, as Python treats them) within the target's range.
  std::optional<std::int64_t> as_int64(PickleId id) const;
  std::optional<std::uint64_t> as_uint64(PickleId id) const;
  // kString and kBytes.
  absl::string_view as_string(PickleId id) const {
    const Node& n = nodes_[id];
    return absl::string_view(strings_.data() + n.u, n.len);
  }
  // Items of a list or tuple; a dict's keys and values, alternating; empty for scalars.
  absl::Span<const PickleId> items(PickleId id) const {
    if (!is_dict(id) && !is_sequence(id)) return {};
    const Node& n = nodes_[id];
    return absl::Span<const PickleId>(items_.data() + n.u, n.len);
  }

  // The value under a string key of a dict (the last one, if the pickle repeats a key);
  // nullopt for anything but a dict.
  std::optional<PickleId> Find(PickleId dict, absl::string_view key) const;

 private:
  friend class PickleTreeBuilder;
  // 16 bytes a value (a 25M-event snapshot has 150M of them): the kind apart, the offset's
  // low 32 bits here and its high ones from the node id (offsets rise with ids).
  struct Node {
    union {
      std::int64_t i;
      std::uint64_t u;  // also bool, a string's start in strings_, a container's in items_
      double d;
    };
    std::uint32_t len = 0;  // string length, or a container's item count
    std::uint32_t offset_low = 0;
    Node() : u(0) {}
  };
  std::vector<Node> nodes_;
  std::vector<PickleKind> kinds_;
  std::vector<PickleId> epochs_;  // epochs_[k]: the first node at or past byte (k + 1) << 32
  std::string strings_;
  std::vector<PickleId> items_;  // every container's items, each a run
  PickleId root_ = 0;
};

// Used by the reader (and tests) to make trees.
class PickleTreeBuilder {
 public:
  // Room for about `nodes` values and `items` container items, so that a large pickle does
  // not copy its tree as it grows (memory only reserved is not touched).
  void Reserve(std::size_t nodes, std::size_t items = 0) {
    tree_.nodes_.reserve(nodes);
    tree_.kinds_.reserve(nodes);
    tree_.items_.reserve(items);
  }
  PickleId None(std::uint64_t offset);
  PickleId Bool(bool value, std::uint64_t offset);
  PickleId Int(std::int64_t value, std::uint64_t offset);
  PickleId Uint(std::uint64_t value, std::uint64_t offset);  // stored as kInt when it fits
  PickleId Float(double value, std::uint64_t offset);
  PickleId String(absl::string_view value, std::uint64_t offset, PickleKind kind = PickleKind::kString);
  PickleId Container(PickleKind kind, std::uint64_t offset);  // empty list, tuple or dict
  // Adds `items` at the end of `container`'s.
  void Append(PickleId container, absl::Span<const PickleId> items);
  const PickleTree& tree() const { return tree_; }
  // Every container's items in one run again (see Append); the tree reads whole after it.
  void Settle();
  PickleTree Finish(PickleId root) &&;

 private:
  // Offsets past 4 GiB must come in rising order, as the reader's do.
  PickleId Add(PickleKind kind, std::uint64_t offset, PickleTree::Node node = {});
  PickleTree tree_;
  // Containers that gained items after another container's were added (a long list
  // appended to in batches, its items built in between): their items, until Settle.
  absl::flat_hash_map<PickleId, std::vector<PickleId>> scattered_;
};

}  // namespace gpumem::trace
