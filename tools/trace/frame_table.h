// Interning of frames and stacks while a reader builds a Trace: each distinct frame and
// each distinct stack is stored once.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "tools/trace/trace.h"

namespace gpumem::trace {

class FrameTable {
 public:
  // Interns into `trace`, which must outlive the table. Picks up what it already holds.
  explicit FrameTable(Trace* trace);

  std::uint32_t Intern(const Frame& frame);
  // Frame ids innermost first; the empty stack is id 0.
  std::uint32_t InternStack(const std::vector<std::uint32_t>& frame_ids);

 private:
  using FrameKey = std::tuple<std::string, std::int32_t, std::string>;
  Trace* trace_;
  absl::flat_hash_map<FrameKey, std::uint32_t> frame_ids_;
  absl::flat_hash_map<std::vector<std::uint32_t>, std::uint32_t> stack_ids_;
};

}  // namespace gpumem::trace
