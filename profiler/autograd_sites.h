// Backward allocations under the forward code that created their node, for the live view
// (the report does the same from the trace: tools/trace/autograd_links.h). Autograd runs
// C++ backward nodes on threads with no Python frames, so their allocations have no stack
// of their own; each forward allocation carries the sequence number its op's node takes
// plus one, each backward one the number of the node being run. The forward stacks are
// kept in a fixed ring by sequence number: no lock, bounded memory; a node more than the
// ring's size of ops back goes unnamed. A node with no forward op (AccumulateGrad, which
// makes a parameter's gradient) or one past the ring takes the stack of the forward
// thread's last allocation: the gradient seed of the loss.backward() that runs it.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "profiler/raw_record.h"
#include "profiler/trace_format.h"

namespace gpumem {

class AutogradSites {
 public:
  // The stack the live view files record `r` under: a backward allocation without a
  // stack of its own takes that of its node's forward op, where the ring still has it.
  std::uint32_t LiveStack(const RawRecord& r) {
    if (!r.has_autograd || r.type != format::RecordType::kAlloc) return r.stack_id;
    if (r.autograd_node_frame == 0) {
      if (r.stack_id != 0) {
        Remember(r.autograd_seq, r.stack_id);
        RememberLastOfThread(r.autograd_thread, r.stack_id);
      }
      return r.stack_id;
    }
    if (r.stack_id != 0) return r.stack_id;
    const std::uint32_t forward =
        r.autograd_seq == format::kNoAutogradSequence ? 0 : Lookup(r.autograd_seq + 1);
    return forward != 0 ? forward : LastOfThread(r.autograd_thread);
  }

 private:
  static constexpr std::size_t kSlots = std::size_t{1} << 16;
  static constexpr std::size_t kThreadSlots = 256;
  static constexpr std::uint64_t kLow = 0xffffffffu;

  void RememberLastOfThread(std::uint32_t thread, std::uint32_t stack) {
    threads_[thread % kThreadSlots].store((std::uint64_t{thread} << 32) | stack,
                                          std::memory_order_relaxed);
  }
  std::uint32_t LastOfThread(std::uint32_t thread) const {
    const std::uint64_t v = threads_[thread % kThreadSlots].load(std::memory_order_relaxed);
    return (v >> 32) == thread ? static_cast<std::uint32_t>(v & kLow) : 0;
  }

  // A slot holds the low half of a sequence number over the stack id. The op's first
  // allocation carrying the number is its own (its output); later ones are not kept.
  void Remember(std::uint64_t seq, std::uint32_t stack) {
    std::atomic<std::uint64_t>& slot = slots_[seq % kSlots];
    if ((slot.load(std::memory_order_relaxed) >> 32) == (seq & kLow)) return;
    slot.store(((seq & kLow) << 32) | stack, std::memory_order_relaxed);
  }
  std::uint32_t Lookup(std::uint64_t seq) const {
    const std::uint64_t v = slots_[seq % kSlots].load(std::memory_order_relaxed);
    return (v >> 32) == (seq & kLow) ? static_cast<std::uint32_t>(v & kLow) : 0;
  }

  std::array<std::atomic<std::uint64_t>, kSlots> slots_{};
  // A slot holds a forward thread's PyTorch id over the stack of its last allocation.
  std::array<std::atomic<std::uint64_t>, kThreadSlots> threads_{};
};

}  // namespace gpumem
