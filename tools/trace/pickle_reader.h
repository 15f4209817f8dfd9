// A reader of the pickle subset that PyTorch memory snapshots use (protocols 2 to 5):
// None, bools, ints up to 64 bits, floats, str, bytes, lists, tuples, dicts and the memo.
// No classes, no globals, no code: anything else is refused with an error naming the
// opcode and its byte offset. Built for hostile input: every read is bounds-checked, the
// work is iterative (no recursion), and memory grows at most linearly with the input.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/trace/pickle_value.h"

namespace gpumem::trace {

struct PickleLimits {
  // Values on the unpickler's stack at once, and MARKs open at once. Real snapshots need
  // a handful of each; the caps keep a crafted file from nesting without bound.
  std::size_t max_stack = 1 << 20;
  std::size_t max_marks = 1024;
  // Containers inside containers: real snapshots nest 6 deep; Python's own recursion
  // limit (1000) would stop far sooner than a crafted file.
  std::size_t max_depth = 100;
};

// Errors read "NAME: byte N: what" (N is the offset of the opcode at fault).
absl::StatusOr<PickleTree> ReadPickle(absl::string_view data, const std::string& name,
                                      const PickleLimits& limits = {});

}  // namespace gpumem::trace
