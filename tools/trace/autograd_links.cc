#include "tools/trace/autograd_links.h"

#include <iterator>
#include <optional>
#include <string>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "tools/trace/backward_caller.h"

namespace gpumem::trace {

namespace {

// PyTorch's sequence number of a node made outside a forward op (AccumulateGrad).
constexpr std::uint64_t kNoSequence = ~std::uint64_t{0};

// Each forward thread's allocations with a stack, by time: the last before a backward
// event is the one that started its pass (loss.backward()'s gradient seed).
class ThreadHistory {
 public:
  void Add(std::uint32_t thread, std::int64_t time_us, std::uint32_t stack) {
    by_thread_[thread].push_back({time_us, stack});
  }
  void Sort() {
    for (auto& [thread, list] : by_thread_) absl::c_stable_sort(list);
  }
  std::uint32_t LastBefore(std::uint32_t thread, std::int64_t time_us) const {
    const auto it = by_thread_.find(thread);
    if (it == by_thread_.end()) return 0;
    const auto after = absl::c_upper_bound(
        it->second, std::make_pair(time_us, ~std::uint32_t{0}));
    return after == it->second.begin() ? 0 : std::prev(after)->second;
  }

 private:
  absl::flat_hash_map<std::uint32_t, std::vector<std::pair<std::int64_t, std::uint32_t>>> by_thread_;
};

}  // namespace

AutogradSummary AttributeBackward(const std::vector<AutogradLink>& links, FrameTable* table,
                                  Trace* trace) {
  AutogradSummary summary;
  // (forward thread, sequence number) -> the earliest forward event with a stack.
  using Key = std::pair<std::uint32_t, std::uint64_t>;
  absl::flat_hash_map<Key, std::size_t> forward;
  ThreadHistory history;
  for (const AutogradLink& l : links) {
    if (l.backward || l.event >= trace->events.size()) continue;
    const Event& e = trace->events[l.event];
    if (e.stack_id == 0) continue;
    history.Add(l.thread, e.time_us, e.stack_id);
    auto [it, inserted] = forward.try_emplace(Key{l.thread, l.seq}, l.event);
    if (!inserted && e.time_us < trace->events[it->second].time_us) it->second = l.event;
  }
  history.Sort();
  std::optional<std::uint32_t> pass_frame;
  absl::flat_hash_map<std::uint32_t, std::uint32_t> display_frame;  // node frame -> shown
  for (const AutogradLink& l : links) {
    if (!l.backward || l.event >= trace->events.size() ||
        l.node_frame >= trace->frames.size()) {
      continue;
    }
    ++summary.backward;
    auto [dit, fresh] = display_frame.try_emplace(l.node_frame, 0);
    if (fresh) {
      const Frame& node = trace->frames[l.node_frame];
      dit->second = table->Intern(Frame{std::string(kAutogradFile), 0,
                                        absl::StrCat(node.function, " (backward)")});
    }
    Event& e = trace->events[l.event];
    // The node was created just before its op's kernels ran: they carry seq + 1. Else
    // the last allocation before the node (seq itself).
    std::uint32_t forward_stack = 0;
    for (std::uint64_t seq : {l.seq + 1, l.seq}) {
      auto fit = l.seq == kNoSequence ? forward.end() : forward.find(Key{l.thread, seq});
      if (fit != forward.end()) {
        forward_stack = trace->events[fit->second].stack_id;
        break;
      }
    }
    std::vector<std::uint32_t> frames = trace->stacks[e.stack_id];  // copy: stacks grows
    frames.push_back(dit->second);
    if (forward_stack != 0) {
      ++summary.attributed;
    } else if ((forward_stack = history.LastBefore(l.thread, e.time_us)) != 0) {
      // No forward op: the call that started the pass, as a snapshot's are shown.
      if (!pass_frame) {
        pass_frame = table->Intern({std::string(kBackwardPassFile), 0, "autograd's thread"});
      }
      frames.push_back(*pass_frame);
      ++summary.to_caller;
    }
    const std::vector<std::uint32_t>& fwd = trace->stacks[forward_stack];
    frames.insert(frames.end(), fwd.begin(), fwd.end());
    e.stack_id = table->InternStack(frames);
  }
  return summary;
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
