#include "tools/trace/snapshot_writer.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"

#include "absl/strings/str_cat.h"
#include "tools/trace/backward_caller.h"
#include "tools/trace/pickle_writer.h"

namespace gpumem::trace {
namespace {

using DeviceAddr = std::pair<std::int32_t, std::uint64_t>;

// Blocks whose free was requested but not completed when the trace ends: PyTorch lists them
// as active_pending_free, and memory_viz, replaying backwards, expects them live.
absl::flat_hash_set<DeviceAddr> PendingFrees(const Trace& t) {
  absl::flat_hash_set<DeviceAddr> pending;
  for (const Event& e : t.events) {
    if (e.action == Action::kFreeRequested) pending.insert({e.device, e.addr});
    if (e.action == Action::kFreeCompleted || e.action == Action::kAlloc) pending.erase({e.device, e.addr});
  }
  return pending;
}

using SegmentsAt = std::map<DeviceAddr, Segment>;
using BlocksAt = std::map<DeviceAddr, SegmentBlock>;

// The segments and the allocated blocks live after the last event.
void LiveAtTheEnd(const Trace& t, SegmentsAt* segments, BlocksAt* blocks) {
  for (const Event& e : t.events) {
    const DeviceAddr key{e.device, e.addr};
    switch (e.action) {
      case Action::kSegmentAlloc:
      case Action::kSegmentMap: {
        Segment& seg = (*segments)[key];
        seg.device = e.device;
        seg.addr = e.addr;
        seg.total_size = e.size;
        seg.stream = e.stream;
        seg.is_expandable = e.action == Action::kSegmentMap;
        break;
      }
      case Action::kSegmentFree:
      case Action::kSegmentUnmap:
        segments->erase(key);
        break;
      case Action::kAlloc:
        (*blocks)[key] = SegmentBlock{e.addr, e.size, e.size, /*allocated=*/true, e.stack_id};
        break;
      case Action::kFreeCompleted:
        blocks->erase(key);
        break;
      default:
        break;
    }
  }
}

// `seg`'s blocks: the live ones inside it, in address order, and free gaps between.
void Tile(Segment& seg, const BlocksAt& blocks) {
  const std::uint64_t end = seg.addr + seg.total_size;
  std::uint64_t cursor = seg.addr;
  auto gap = [&](std::uint64_t until) {
    if (until > cursor) seg.blocks.push_back({cursor, until - cursor, until - cursor, false, 0});
  };
  for (auto it = blocks.lower_bound({seg.device, seg.addr});
       it != blocks.end() && it->first.first == seg.device && it->first.second < end; ++it) {
    const SegmentBlock& b = it->second;
    if (b.addr < cursor || b.size > end - b.addr) continue;  // overlaps: not PyTorch's layout
    gap(b.addr);
    seg.blocks.push_back(b);
    cursor = b.addr + b.size;
  }
  gap(end);
}

// For traces that carry no end state (gpumem and TSV traces): the segments live at the end,
// each tiled by its live blocks and free gaps, as PyTorch lists them. memory_viz rebuilds
// earlier states by undoing events from this one, so it must agree with the events.
std::vector<Segment> EndStateFromEvents(const Trace& t) {
  SegmentsAt segments;
  BlocksAt blocks;
  LiveAtTheEnd(t, &segments, &blocks);
  std::vector<Segment> out;
  out.reserve(segments.size());
  for (auto& entry : segments) {
    Tile(entry.second, blocks);
    out.push_back(std::move(entry.second));
  }
  return out;
}

class SnapshotWriter {
 public:
  explicit SnapshotWriter(const Trace& trace)
      : t_(trace), frame_memo_(trace.frames.size(), kUnset), pending_(PendingFrees(trace)) {}

  absl::StatusOr<std::string> Run() {
    for (const Event& e : t_.events) {
      if (e.device < 0 || e.device >= kMaxDevices) {
        return absl::InvalidArgumentError(absl::StrCat(t_.source, ": event on device ", e.device));
      }
      if (e.stack_id >= t_.stacks.size()) {
        return absl::InvalidArgumentError(absl::StrCat(t_.source, ": event names stack ", e.stack_id,
                                                       " of ", t_.stacks.size()));
      }
    }
    for (const Segment& seg : t_.segments) {
      if (seg.device < 0 || seg.device >= kMaxDevices) {
        return absl::InvalidArgumentError(absl::StrCat(t_.source, ": segment on device ", seg.device));
      }
    }
    for (const auto& stack : t_.stacks) {
      for (std::uint32_t f : stack) {
        if (f >= t_.frames.size()) {
          return absl::InvalidArgumentError(absl::StrCat(t_.source, ": a stack names frame ", f,
                                                         " of ", t_.frames.size()));
        }
      }
    }
    w_.BeginDict();
    w_.String("segments");
    Segments(t_.segments.empty() ? EndStateFromEvents(t_) : t_.segments);
    w_.String("device_traces");
    DeviceTraces();
    w_.String("allocator_settings");
    w_.BeginDict();
    w_.String("PYTORCH_CUDA_ALLOC_CONF");
    w_.String(t_.expandable_segments ? "expandable_segments:True" : "");
    w_.String("expandable_segments");
    w_.Bool(t_.expandable_segments);
    w_.EndDict();
    w_.String("external_annotations");
    Annotations();
    w_.EndDict();
    return std::move(w_).Finish();
  }

 private:
  static constexpr std::uint32_t kUnset = ~std::uint32_t{0};
  static constexpr std::int32_t kMaxDevices = 4096;

  // Frame dicts are written once and referenced through the memo after, as PyTorch's own
  // snapshots do. A stack the reader gave the call that started its backward pass
  // (backward_caller.h) is written with its own frames only, as PyTorch recorded it.
  void Frames(std::uint32_t stack_id) {
    const std::vector<std::uint32_t>& stack =
        stack_id < t_.stacks.size() ? t_.stacks[stack_id] : t_.stacks[0];
    w_.BeginList();
    for (std::uint32_t f : stack) {
      if (t_.frames[f].filename == kBackwardPassFile) break;
      if (frame_memo_[f] != kUnset) {
        w_.Get(frame_memo_[f]);
        continue;
      }
      const Frame& frame = t_.frames[f];
      w_.BeginDict();
      w_.String("name");
      w_.String(frame.function);
      w_.String("filename");
      w_.String(frame.filename);
      w_.String("line");
      w_.Int(frame.line);
      w_.EndDict();
      frame_memo_[f] = w_.Memoize();
    }
    w_.EndList();
  }

  void Segments(const std::vector<Segment>& segments) {
    w_.BeginList();
    for (const Segment& seg : segments) SegmentDict(seg);
    w_.EndList();
  }

  // One segment as PyTorch's snapshot lists it; its allocated and requested sizes are
  // its allocated blocks' (the caching allocator's active size is the same here).
  void SegmentDict(const Segment& seg) {
    std::uint64_t allocated = 0;
    std::uint64_t requested = 0;
    for (const SegmentBlock& b : seg.blocks) {
      if (b.allocated) {
        allocated += b.size;
        requested += b.requested_size;
      }
    }
    w_.BeginDict();
    w_.String("device");
    w_.Int(seg.device);
    w_.String("address");
    w_.Uint(seg.addr);
    w_.String("total_size");
    w_.Uint(seg.total_size);
    w_.String("allocated_size");
    w_.Uint(allocated);
    w_.String("active_size");
    w_.Uint(allocated);
    w_.String("requested_size");
    w_.Uint(requested);
    w_.String("stream");
    w_.Uint(seg.stream);
    w_.String("segment_type");
    w_.String(seg.is_large_pool ? "large" : "small");
    w_.String("segment_pool_id");
    w_.IntPair(0, 0);
    w_.String("is_expandable");
    w_.Bool(seg.is_expandable);
    w_.String("frames");
    w_.BeginList();
    w_.EndList();
    w_.String("blocks");
    w_.BeginList();
    for (const SegmentBlock& b : seg.blocks) BlockDict(seg.device, b);
    w_.EndList();
    w_.EndDict();
  }

  void BlockDict(std::int32_t device, const SegmentBlock& b) {
    w_.BeginDict();
    w_.String("address");
    w_.Uint(b.addr);
    w_.String("size");
    w_.Uint(b.size);
    w_.String("requested_size");
    w_.Uint(b.requested_size);
    w_.String("state");
    w_.String(pending_.contains({device, b.addr}) ? "active_pending_free"
              : b.allocated                       ? "active_allocated"
                                                  : "inactive");
    w_.String("frames");
    Frames(b.stack_id);
    w_.EndDict();
  }

  void DeviceTraces() {
    // PyTorch always lists device 0; Run() checked every device index.
    // A device with segments but no events gets its (empty) list too: memory_viz offers
    // only the devices that device_traces covers.
    std::size_t devices = 1;
    for (const Segment& seg : t_.segments) devices = std::max<std::size_t>(devices, seg.device + 1);
    std::vector<std::vector<const Event*>> by_device(devices);
    for (const Event& e : t_.events) {
      if (e.action == Action::kStep || e.action == Action::kAnnotate) continue;
      if (static_cast<std::size_t>(e.device) >= by_device.size()) by_device.resize(e.device + 1);
      by_device[e.device].push_back(&e);
    }
    w_.BeginList();
    for (const std::vector<const Event*>& events : by_device) {
      w_.BeginList();
      for (const Event* event : events) {
        const Event& e = *event;
        w_.BeginDict();
        w_.String("action");
        w_.String(ActionName(e.action));
        if (e.action == Action::kOom) {
          w_.String("device_free");
          w_.Uint(e.device_free);
        } else {
          w_.String("addr");
          w_.Uint(e.addr);
        }
        w_.String("size");
        w_.Uint(e.size);
        w_.String("stream");
        w_.Uint(e.stream);
        w_.String("time_us");
        w_.Int(e.time_us);
        w_.String("frames");
        Frames(e.stack_id);
        w_.EndDict();
      }
      w_.EndList();
    }
    w_.EndList();
  }

  void Annotations() {
    w_.BeginList();
    for (const Annotation& a : t_.annotations) WriteAnnotation(a.start, a.name, a.device, a.time_us);
    for (const Event& e : t_.events) {
      if (e.action == Action::kStep) WriteAnnotation(true, "gpumem.step", e.device, e.time_us);
    }
    w_.EndList();
  }
  void WriteAnnotation(bool start, absl::string_view name, std::int32_t device, std::int64_t time_us) {
    w_.BeginDict();
    w_.String("stage");
    w_.String(start ? "START" : "END");
    w_.String("name");
    w_.String(name);
    w_.String("device");
    w_.Int(device);
    w_.String("time_us");
    w_.Int(time_us);
    w_.EndDict();
  }

  const Trace& t_;
  PickleWriter w_;
  std::vector<std::uint32_t> frame_memo_;
  absl::flat_hash_set<DeviceAddr> pending_;
};

}  // namespace

absl::StatusOr<std::string> WriteSnapshotPickle(const Trace& trace) {
  return SnapshotWriter(trace).Run();
}

}  // namespace gpumem::trace
