#include "tools/trace/autograd_links.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace gpumem::trace {

AutogradSummary AttributeBackward(const std::vector<AutogradLink>& links, FrameTable* table,
                                  Trace* trace) {
  AutogradSummary summary;
  // (forward thread, sequence number) -> the earliest forward event with a stack.
  using Key = std::pair<std::uint32_t, std::uint64_t>;
  absl::flat_hash_map<Key, std::size_t> forward;
  for (const AutogradLink& l : links) {
    if (l.backward || l.event >= trace->events.size()) continue;
    const Event& e = trace->events[l.event];
    if (e.stack_id == 0) continue;
    auto [it, inserted] = forward.try_emplace(Key{l.thread, l.seq}, l.event);
    if (!inserted && e.time_us < trace->events[it->second].time_us) it->second = l.event;
  }
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
      auto fit = forward.find(Key{l.thread, seq});
      if (fit != forward.end()) {
        forward_stack = trace->events[fit->second].stack_id;
        break;
      }
    }
    if (forward_stack != 0) ++summary.attributed;
    std::vector<std::uint32_t> frames = trace->stacks[e.stack_id];  // copy: stacks grows
    frames.push_back(dit->second);
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
