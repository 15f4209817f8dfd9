// The fixed-size record that the hot path appends to its thread's buffer. The background
// writer turns batches of them into compressed chunks (profiler/chunk_encoder.h).
#pragma once

#include <cstdint>

#include "profiler/trace_format.h"

namespace gpumem {

struct RawRecord {
  std::int64_t time_ns = 0;   // CLOCK_MONOTONIC
  std::uint64_t addr = 0;
  std::uint64_t size = 0;     // bytes; the step number for kStep
  std::uint64_t stream = 0;
  std::uint64_t extra = 0;    // kOom: the device's free bytes
  std::uint32_t stack_id = 0; // StackTable id; 0 = no stack
  std::uint32_t thread = 0;   // kernel thread id
  std::int32_t device = 0;    // -1 for host (pinned) memory
  // PyTorch autograd link (docs/trace-format.md, record type 12): the sequence number
  // of the forward op (forward events) or of the backward node (backward events), the
  // forward thread's PyTorch id, and the node's name frame (0 on forward events).
  std::uint64_t autograd_seq = 0;
  std::uint32_t autograd_thread = 0;
  std::uint32_t autograd_node_frame = 0;
  format::RecordType type = format::RecordType::kAlloc;
  bool has_extra = false;
  bool has_autograd = false;
};

}  // namespace gpumem
