#include "tools/trace/autograd_links.h"

#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "profiler/trace_format.h"
#include "tools/trace/backward_caller.h"

namespace gpumem::trace {

namespace {

// Each forward thread's allocations with a stack, by time: the last before a backward
// event is the one that started its pass (loss.backward()'s gradient seed).
class ThreadHistory {
 public:
  void Add(std::uint32_t thread, std::int64_t time_us, std::uint32_t stack) {
    by_thread_[thread].push_back({time_us, stack});
  }
  void Sort() {
    for (auto& [thread, list] : by_thread_) {
      absl::c_stable_sort(list, [](const Entry& a, const Entry& b) { return a.first < b.first; });
    }
  }
  std::uint32_t LastBefore(std::uint32_t thread, std::int64_t time_us) const {
    const auto it = by_thread_.find(thread);
    if (it == by_thread_.end()) return 0;
    const auto after = absl::c_upper_bound(
        it->second, time_us, [](std::int64_t t, const Entry& e) { return t < e.first; });
    return after == it->second.begin() ? 0 : std::prev(after)->second;
  }

 private:
  using Entry = std::pair<std::int64_t, std::uint32_t>;  // (time, stack)
  absl::flat_hash_map<std::uint32_t, std::vector<Entry>> by_thread_;
};

class Attributor {
 public:
  Attributor(const std::vector<AutogradLink>& links, FrameTable* table, Trace* trace)
      : links_(links), table_(*table), trace_(*trace) {}

  AutogradSummary Run() {
    IndexForward();
    for (const AutogradLink& l : links_) {
      if (l.backward && l.event < trace_.events.size() && l.node_frame < trace_.frames.size()) {
        Attribute(l);
      }
    }
    return summary_;
  }

 private:
  using Key = std::pair<std::uint32_t, std::uint64_t>;  // (forward thread, sequence number)

  void IndexForward() {
    for (const AutogradLink& l : links_) {
      if (l.backward || l.event >= trace_.events.size()) continue;
      const Event& e = trace_.events[l.event];
      if (e.stack_id == 0) continue;
      history_.Add(l.thread, e.time_us, e.stack_id);
      auto [it, inserted] = forward_.try_emplace(Key{l.thread, l.seq}, l.event);
      if (!inserted && e.time_us < trace_.events[it->second].time_us) it->second = l.event;
    }
    history_.Sort();
  }

  // The node was created just before its op's kernels ran: they carry seq + 1. Else the
  // last allocation before the node (seq itself). A node with no number has no op.
  std::uint32_t ForwardOpStack(const AutogradLink& l) const {
    if (l.seq == format::kNoAutogradSequence) return 0;
    for (std::uint64_t seq : {l.seq + 1, l.seq}) {
      const auto it = forward_.find(Key{l.thread, seq});
      if (it != forward_.end()) return trace_.events[it->second].stack_id;
    }
    return 0;
  }

  // Own frames, "<node> (backward)", then the forward op's stack; with no op, a "<backward
  // pass>" frame and the stack of the call that started the pass, as a snapshot's are.
  void Attribute(const AutogradLink& l) {
    ++summary_.backward;
    Event& e = trace_.events[l.event];
    std::vector<std::uint32_t> frames = trace_.stacks[e.stack_id];  // copy: stacks grows
    frames.push_back(NodeFrame(l.node_frame));
    std::uint32_t behind = ForwardOpStack(l);
    if (behind != 0) {
      ++summary_.attributed;
    } else if ((behind = history_.LastBefore(l.thread, e.time_us)) != 0) {
      frames.push_back(PassFrame());
      ++summary_.to_caller;
    }
    const std::vector<std::uint32_t>& rest = trace_.stacks[behind];
    frames.insert(frames.end(), rest.begin(), rest.end());
    e.stack_id = table_.InternStack(frames);
  }

  std::uint32_t NodeFrame(std::uint32_t node_frame) {
    auto [it, fresh] = node_frames_.try_emplace(node_frame, 0);
    if (fresh) {
      const Frame& node = trace_.frames[node_frame];
      it->second = table_.Intern(Frame{std::string(kAutogradFile), 0,
                                       absl::StrCat(node.function, " (backward)")});
    }
    return it->second;
  }

  std::uint32_t PassFrame() {
    if (!pass_frame_) {
      pass_frame_ = InternBackwardPassFrame(&table_);
    }
    return *pass_frame_;
  }

  const std::vector<AutogradLink>& links_;
  FrameTable& table_;
  Trace& trace_;
  AutogradSummary summary_;
  absl::flat_hash_map<Key, std::size_t> forward_;  // the earliest forward event with a stack
  ThreadHistory history_;
  absl::flat_hash_map<std::uint32_t, std::uint32_t> node_frames_;  // node frame -> shown
  std::optional<std::uint32_t> pass_frame_;
};

}  // namespace

AutogradSummary AttributeBackward(const std::vector<AutogradLink>& links, FrameTable* table,
                                  Trace* trace) {
  return Attributor(links, table, trace).Run();
}

std::vector<bool> BackwardStacks(const Trace& trace) {
  std::vector<bool> backward(trace.stacks.size(), false);
  for (std::size_t s = 0; s < trace.stacks.size(); ++s) {
    for (std::uint32_t f : trace.stacks[s]) {
      if (f < trace.frames.size() && trace.frames[f].filename == kAutogradFile) {
        backward[s] = true;
        break;
      }
    }
  }
  return backward;
}

}  // namespace gpumem::trace
