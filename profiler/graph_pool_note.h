// The notes (annotations, type 11) that bound a CUDA graph's private memory pool in a
// trace, written by the Python package around torch.cuda.CUDAGraph's captures:
//   "gpumem: graph pool 0.7: capture begins"  (allocations on the device go to the pool)
//   "gpumem: graph pool 0.7: capture ends"
//   "gpumem: graph pool 0.7: released"        (the last graph that used it is gone)
// PyTorch names a new pool only once its capture has ended, so a capture into a new pool
// begins as pool 0.0 (PyTorch's default pool, never a graph's) and its end names it.
// A pool keeps every byte its captures needed until it is released, free or not: a graph
// kept alive keeps that memory from everything else, so readers count it as held by the
// code that made the pool.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace gpumem::format {

inline constexpr absl::string_view kGraphPoolNotePrefix = "gpumem: graph pool ";

enum class GraphPoolChange : std::uint8_t {
  kCaptureBegins = 1,
  kCaptureEnds = 2,
  kReleased = 3,
};

// PyTorch's MempoolId_t: a pair of numbers.
using GraphPoolId = std::pair<std::uint64_t, std::uint64_t>;
inline constexpr GraphPoolId kNewGraphPool{0, 0};

struct GraphPoolNote {
  GraphPoolId pool;
  GraphPoolChange change = GraphPoolChange::kCaptureBegins;
};

std::string GraphPoolNoteText(const GraphPoolNote& note);

// nullopt where `text` is not such a note or is malformed.
std::optional<GraphPoolNote> ParseGraphPoolNote(absl::string_view text);

// Numbers each device's pools densely as their notes come, in order: a capture into a
// new pool takes a number when it begins, and the id its end names joins that number.
class GraphPoolNumbers {
 public:
  std::uint32_t Number(std::int32_t device, const GraphPoolNote& note);

 private:
  absl::flat_hash_map<std::pair<std::int32_t, GraphPoolId>, std::uint32_t> numbers_;
  absl::flat_hash_map<std::int32_t, std::uint32_t> unnamed_;  // a new pool a capture fills
  std::uint32_t next_ = 0;
};

}  // namespace gpumem::format
