#include "tools/trace/snapshot_reader.h"

#include <algorithm>
#include <limits>
#include <functional>
#include <optional>
#include <queue>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "tools/trace/backward_caller.h"
#include "tools/trace/frame_table.h"
#include "tools/trace/pickle_reader.h"
#include "tools/trace/snapshot_prelude.h"

namespace gpumem::trace {
namespace {

// Far more than any host has; bounds what a crafted file can make the writer emit.
constexpr std::int32_t kMaxDevices = 4096;

class Converter {
 public:
  Converter(const PickleTree& tree, const std::string& name)
      : t_(tree), name_(name), frames_(&trace_) {
    trace_.source = name;
    trace_.format = "pytorch-snapshot";
  }

  absl::StatusOr<Trace> Run() {
    const PickleId root = t_.root();
    absl::Status s;
    if (t_.is_sequence(root)) {
      s = ReadSegmentList(root);  // torch.cuda.memory_snapshot(): the segments alone
    } else if (t_.is_dict(root)) {
      s = ReadSettings(root);
      if (s.ok()) s = ReadDeviceTraces(root);
      if (s.ok()) s = ReadSegments(root);
      if (s.ok()) s = ReadAnnotations(root);
    } else {
      return Error(root, absl::StrCat("the snapshot is a ", PickleKindName(t_.kind(root)),
                                      ", not a dict with 'segments' and 'device_traces' "
                                      "(torch.cuda.memory._snapshot()) or a list of segments "
                                      "(torch.cuda.memory_snapshot())"));
    }
    if (!s.ok()) return s;
    SynthesizePrelude(&trace_);
    AttributeToBackwardCaller(&trace_);
    return std::move(trace_);
  }

 private:
  absl::Status Error(PickleId at, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": byte ", t_.offset(at), ": ", what));
  }
  absl::Status WrongType(PickleId at, absl::string_view path, absl::string_view want) const {
    return Error(at, absl::StrCat(path, " is a ", PickleKindName(t_.kind(at)), ", not a ", want));
  }
  absl::StatusOr<PickleId> Require(PickleId dict, absl::string_view key, absl::string_view path) const {
    std::optional<PickleId> v = t_.Find(dict, key);
    if (!v) return Error(dict, absl::StrCat(path, " has no '", key, "'"));
    return *v;
  }
  absl::Status Sequence(PickleId id, absl::string_view path) const {
    return t_.is_sequence(id) ? absl::OkStatus() : WrongType(id, path, "list");
  }
  absl::Status Dict(PickleId id, absl::string_view path) const {
    return t_.is_dict(id) ? absl::OkStatus() : WrongType(id, path, "dict");
  }
  // An unsigned field; `fallback` when absent (nullopt: required).
  template <typename T>
  absl::Status Field(PickleId dict, absl::string_view key, absl::string_view path, T* out,
                     std::optional<T> fallback = std::nullopt) const {
    std::optional<PickleId> v = t_.Find(dict, key);
    if (!v) {
      if (fallback) {
        *out = *fallback;
        return absl::OkStatus();
      }
      return Error(dict, absl::StrCat(path, " has no '", key, "'"));
    }
    if constexpr (std::is_same_v<T, bool>) {
      if (t_.kind(*v) != PickleKind::kBool) return WrongType(*v, absl::StrCat(path, ".", key), "bool");
      *out = t_.as_bool(*v);
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (t_.kind(*v) != PickleKind::kString) return WrongType(*v, absl::StrCat(path, ".", key), "str");
      *out = std::string(t_.as_string(*v));
    } else if constexpr (std::is_signed_v<T>) {
      std::optional<std::int64_t> i = t_.as_int64(*v);
      if (!i || *i < std::numeric_limits<T>::min() || *i > std::numeric_limits<T>::max()) {
        return Error(*v, absl::StrCat(path, ".", key, " is not an integer in range"));
      }
      *out = static_cast<T>(*i);
    } else {
      std::optional<std::uint64_t> u = t_.as_uint64(*v);
      if (!u) return Error(*v, absl::StrCat(path, ".", key, " is not a non-negative integer"));
      *out = *u;
    }
    return absl::OkStatus();
  }

  // A frame's line. PyTorch writes a line it could not find as -1 in an unsigned 64-bit
  // integer (torch.compile's fake tensors do): that, or any integer out of range, is read
  // as 0, unknown, for one odd frame must not refuse the whole snapshot.
  absl::Status Line(PickleId frame, absl::string_view path, std::int32_t* line) const {
    std::optional<PickleId> v = t_.Find(frame, "line");
    if (!v) return Error(frame, absl::StrCat(path, " has no 'line'"));
    const std::optional<std::int64_t> i = t_.as_int64(*v);
    if (!i && !t_.as_uint64(*v)) return Error(*v, absl::StrCat(path, ".line is not an integer"));
    const bool in_range = i && *i >= 0 && *i <= std::numeric_limits<std::int32_t>::max();
    *line = in_range ? static_cast<std::int32_t>(*i) : 0;
    return absl::OkStatus();
  }

  absl::Status ReadSettings(PickleId root) {
    std::optional<PickleId> settings = t_.Find(root, "allocator_settings");
    if (!settings || t_.kind(*settings) == PickleKind::kNone) return absl::OkStatus();
    if (absl::Status s = Dict(*settings, "allocator_settings"); !s.ok()) return s;
    return Field(*settings, "expandable_segments", "allocator_settings", &trace_.expandable_segments,
                 std::optional<bool>(false));
  }

  // A frames list into a stack id. Snapshots share frame dicts (and sometimes lists)
  // through the memo, so caching by node id makes this cheap.
  absl::StatusOr<std::uint32_t> Stack(PickleId owner, absl::string_view path) {
    std::optional<PickleId> list = t_.Find(owner, "frames");
    if (!list) return 0u;
    if (auto it = stack_of_list_.find(*list); it != stack_of_list_.end()) return it->second;
    if (absl::Status s = Sequence(*list, absl::StrCat(path, ".frames")); !s.ok()) return s;
    ids_.clear();
    for (PickleId f : t_.items(*list)) {
      auto it = frame_of_dict_.find(f);
      if (it != frame_of_dict_.end()) {
        ids_.push_back(it->second);
        continue;
      }
      const std::string fpath = absl::StrCat(path, ".frames[]");
      if (absl::Status s = Dict(f, fpath); !s.ok()) return s;
      Frame frame;
      absl::Status s = Field(f, "filename", fpath, &frame.filename);
      if (s.ok()) s = Line(f, fpath, &frame.line);
      if (s.ok()) s = Field(f, "name", fpath, &frame.function);
      if (!s.ok()) return s;
      std::uint32_t id = frames_.Intern(frame);
      frame_of_dict_.emplace(f, id);
      ids_.push_back(id);
    }
    std::uint32_t stack = frames_.InternStack(ids_);
    stack_of_list_.emplace(*list, stack);
    return stack;
  }

  absl::Status ReadDeviceTraces(PickleId root) {
    absl::StatusOr<PickleId> traces = Require(root, "device_traces", "the snapshot");
    if (!traces.ok()) return traces.status();
    if (absl::Status s = Sequence(*traces, "device_traces"); !s.ok()) return s;
    absl::Span<const PickleId> devices = t_.items(*traces);
    if (devices.size() > static_cast<std::size_t>(kMaxDevices)) {
      return Error(*traces, absl::StrCat("device_traces lists ", devices.size(), " devices"));
    }
    std::vector<std::size_t> starts;  // where each device's events begin in trace_.events
    for (std::size_t d = 0; d < devices.size(); ++d) {
      const std::string dpath = absl::StrCat("device_traces[", d, "]");
      if (absl::Status s = Sequence(devices[d], dpath); !s.ok()) return s;
      absl::Span<const PickleId> entries = t_.items(devices[d]);
      starts.push_back(trace_.events.size());
      trace_.events.reserve(trace_.events.size() + entries.size());
      for (std::size_t i = 0; i < entries.size(); ++i) {
        absl::Status s = ReadEvent(entries[i], static_cast<std::int32_t>(d),
                                   absl::StrCat(dpath, "[", i, "]"));
        if (!s.ok()) return s;
      }
    }
    starts.push_back(trace_.events.size());
    MergeDevicesByTime(starts);
    return absl::OkStatus();
  }

  // Interleaves the devices' events by time, keeping each device's own order even where
  // its times are not monotonic (the order is what the allocator did; the state rebuild
  // and every replay depend on it). Ties go to the lower device.
  void MergeDevicesByTime(const std::vector<std::size_t>& starts) {
    using Head = std::pair<std::int64_t, std::size_t>;  // (time, device)
    std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
    std::vector<std::size_t> next(starts.begin(), starts.end() - 1);
    for (std::size_t d = 0; d + 1 < starts.size(); ++d) {
      if (starts[d] < starts[d + 1]) heads.push({trace_.events[starts[d]].time_us, d});
    }
    if (heads.size() < 2) return;
    std::vector<Event> merged;
    merged.reserve(trace_.events.size());
    while (!heads.empty()) {
      const std::size_t d = heads.top().second;
      heads.pop();
      merged.push_back(trace_.events[next[d]++]);
      if (next[d] < starts[d + 1]) heads.push({trace_.events[next[d]].time_us, d});
    }
    trace_.events = std::move(merged);
  }

  absl::Status ReadEvent(PickleId entry, std::int32_t device, const std::string& path) {
    if (absl::Status s = Dict(entry, path); !s.ok()) return s;
    absl::StatusOr<PickleId> action = Require(entry, "action", path);
    if (!action.ok()) return action.status();
    if (t_.kind(*action) != PickleKind::kString) return WrongType(*action, path + ".action", "str");
    std::optional<Action> parsed = ParseAction(t_.as_string(*action));
    if (!parsed) {
      return Error(entry, absl::StrCat("event ", path, ": unknown action '",
                                       t_.as_string(*action), "'"));
    }
    Event e;
    e.action = *parsed;
    e.device = device;
    // Only block and segment events need an address and a size.
    const bool needs_addr = e.action <= Action::kSegmentUnmap;
    const std::optional<std::uint64_t> zero(0);
    absl::Status s;
    if (e.action == Action::kOom) {
      s = Field(entry, "device_free", path, &e.device_free, zero);
    } else {
      s = Field(entry, "addr", path, &e.addr, needs_addr ? std::nullopt : zero);
    }
    if (s.ok()) s = Field(entry, "size", path, &e.size, needs_addr ? std::nullopt : zero);
    if (s.ok()) s = Field(entry, "stream", path, &e.stream, zero);
    if (s.ok()) s = Field(entry, "time_us", path, &e.time_us, std::optional<std::int64_t>(0));
    if (!s.ok()) return s;
    absl::StatusOr<std::uint32_t> stack = Stack(entry, path);
    if (!stack.ok()) return stack.status();
    e.stack_id = *stack;
    trace_.events.push_back(e);
    return absl::OkStatus();
  }

  absl::Status ReadSegments(PickleId root) {
    std::optional<PickleId> segments = t_.Find(root, "segments");
    if (!segments) return absl::OkStatus();
    if (absl::Status s = Sequence(*segments, "segments"); !s.ok()) return s;
    return ReadSegmentList(*segments);
  }

  absl::Status ReadSegmentList(PickleId segments) {
    absl::Span<const PickleId> list = t_.items(segments);
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string path = absl::StrCat("segments[", i, "]");
      if (absl::Status s = Dict(list[i], path); !s.ok()) return s;
      Segment seg;
      std::string type;
      absl::Status s = Field(list[i], "device", path, &seg.device, std::optional<std::int32_t>(0));
      if (s.ok()) s = Field(list[i], "address", path, &seg.addr);
      if (s.ok()) s = Field(list[i], "total_size", path, &seg.total_size);
      if (s.ok()) s = Field(list[i], "stream", path, &seg.stream, std::optional<std::uint64_t>(0));
      if (s.ok()) s = Field(list[i], "segment_type", path, &type, std::optional<std::string>("large"));
      if (s.ok()) s = Field(list[i], "is_expandable", path, &seg.is_expandable, std::optional<bool>(false));
      if (!s.ok()) return s;
      if (seg.device < 0 || seg.device >= kMaxDevices) {
        return Error(list[i], absl::StrCat(path, ".device ", seg.device, " is out of range"));
      }
      seg.is_large_pool = type != "small";
      s = ReadBlocks(list[i], path, &seg);
      if (!s.ok()) return s;
      trace_.segments.push_back(std::move(seg));
    }
    return absl::OkStatus();
  }

  absl::Status ReadBlocks(PickleId segment, const std::string& path, Segment* seg) {
    std::optional<PickleId> blocks = t_.Find(segment, "blocks");
    if (!blocks) return absl::OkStatus();
    if (absl::Status s = Sequence(*blocks, path + ".blocks"); !s.ok()) return s;
    absl::Span<const PickleId> list = t_.items(*blocks);
    std::uint64_t next_addr = seg->addr;  // older snapshots leave block addresses implicit
    for (std::size_t j = 0; j < list.size(); ++j) {
      const std::string bpath = absl::StrCat(path, ".blocks[", j, "]");
      if (absl::Status s = Dict(list[j], bpath); !s.ok()) return s;
      SegmentBlock b;
      std::string state;
      absl::Status s = Field(list[j], "size", bpath, &b.size);
      if (s.ok()) s = Field(list[j], "address", bpath, &b.addr, std::optional<std::uint64_t>(next_addr));
      if (s.ok()) s = Field(list[j], "requested_size", bpath, &b.requested_size,
                            std::optional<std::uint64_t>(b.size));
      if (s.ok()) s = Field(list[j], "state", bpath, &state);
      if (!s.ok()) return s;
      b.allocated = state == "active_allocated";
      absl::StatusOr<std::uint32_t> stack = Stack(list[j], bpath);
      if (!stack.ok()) return stack.status();
      b.stack_id = *stack;
      next_addr = b.addr + b.size;
      seg->blocks.push_back(b);
    }
    return absl::OkStatus();
  }

  absl::Status ReadAnnotations(PickleId root) {
    std::optional<PickleId> list = t_.Find(root, "external_annotations");
    if (!list || t_.kind(*list) == PickleKind::kNone) return absl::OkStatus();
    if (absl::Status s = Sequence(*list, "external_annotations"); !s.ok()) return s;
    absl::Span<const PickleId> items = t_.items(*list);
    for (std::size_t i = 0; i < items.size(); ++i) {
      const std::string path = absl::StrCat("external_annotations[", i, "]");
      if (absl::Status s = Dict(items[i], path); !s.ok()) return s;
      Annotation a;
      std::string stage;
      absl::Status s = Field(items[i], "stage", path, &stage);
      if (s.ok()) s = Field(items[i], "name", path, &a.name);
      if (s.ok()) s = Field(items[i], "time_us", path, &a.time_us, std::optional<std::int64_t>(0));
      if (s.ok()) s = Field(items[i], "device", path, &a.device, std::optional<std::int32_t>(0));
      if (!s.ok()) return s;
      if (stage != "START" && stage != "END") {
        return Error(items[i], absl::StrCat(path, ".stage is '", stage, "', not START or END"));
      }
      a.start = stage == "START";
      trace_.annotations.push_back(std::move(a));
    }
    return absl::OkStatus();
  }

  const PickleTree& t_;
  const std::string& name_;
  Trace trace_;
  FrameTable frames_;
  absl::flat_hash_map<PickleId, std::uint32_t> frame_of_dict_;
  absl::flat_hash_map<PickleId, std::uint32_t> stack_of_list_;
  std::vector<std::uint32_t> ids_;
};

}  // namespace

absl::StatusOr<Trace> SnapshotToTrace(const PickleTree& tree, const std::string& name) {
  return Converter(tree, name).Run();
}

absl::StatusOr<Trace> ParseSnapshotPickle(absl::string_view data, const std::string& name) {
  absl::StatusOr<PickleTree> tree = ReadPickle(data, name);
  if (!tree.ok()) return tree.status();
  return SnapshotToTrace(*tree, name);
}

}  // namespace gpumem::trace
