// Interned stacks. The hot path hands over a stack as raw frames (program counters,
// Python code objects + lines, or frames interned by name) and gets a small id; only a
// stack never seen before costs more than one hash lookup. New frames and stacks are
// queued for the writer, which symbolizes native frames (dladdr + demangle) once per
// unique frame on its own thread and writes the definitions before any event using them.
// Thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "profiler/chunk_encoder.h"

namespace gpumem {

// One frame as captured. `tag` says what `a` is: a program counter (kNativeTag), a
// Python code object (kPythonTag, with the line in `b`), or an id from InternNamedFrame
// (kNamedTag).
struct RawFrame {
  static constexpr std::uint32_t kNativeTag = 1;
  static constexpr std::uint32_t kPythonTag = 2;
  static constexpr std::uint32_t kNamedTag = 3;
  static constexpr std::uint32_t kPythonLastiTag = 4;  // b = bytecode offset, not line
  // No default member initializers: capture buffers of these live on the hot path's
  // stack and must not be zeroed on every call.
  std::uint64_t a;
  std::uint32_t b;
  std::uint32_t tag;
  bool operator==(const RawFrame& o) const { return a == o.a && b == o.b && tag == o.tag; }
  template <typename H>
  friend H AbslHashValue(H h, const RawFrame& f) {
    return H::combine(std::move(h), f.a, f.b, f.tag);
  }
};

// Fills a new Python frame's file, function and (for kPythonLastiTag) line; called on
// the capturing thread, once per new frame, while the interpreter state is safe to read.
struct FrameDef;
using PythonNamer = void (*)(const RawFrame& frame, FrameDef* def);

class StackTable {
 public:
  StackTable() = default;
  StackTable(const StackTable&) = delete;
  StackTable& operator=(const StackTable&) = delete;

  // Id of the stack (innermost frame first); 0 for an empty stack.
  std::uint32_t Intern(const RawFrame* frames, std::size_t n,
                       const PythonNamer& namer = nullptr);
  // Id of a stack interned before; 0 if it never was. Adds nothing, names nothing.
  std::uint32_t Find(const RawFrame* frames, std::size_t n) const;
  // A frame known by its names (an API entry point, a test frame).
  std::uint32_t InternNamedFrame(format::FrameKind kind, const std::string& function,
                                 const std::string& filename, std::int32_t line);

  // Definitions queued since the last call, native frames symbolized.
  void TakePending(std::vector<FrameDef>* frames, std::vector<StackDef>* stacks);

  std::size_t stack_count() const;

 private:
  static constexpr std::size_t kShards = 16;
  // Looked up by span, so a known stack costs no allocation. Hashed and compared as one
  // run of bytes (RawFrame has no padding): absl's hash of a span of structs mixes every
  // field on its own, five times slower for a known 30-frame Python stack
  // (recorder_bench's BM_InternKnownPythonStack; bench/python_stack_bench.py end to end).
  static_assert(std::has_unique_object_representations_v<RawFrame>);
  struct SpanHash {
    using is_transparent = void;
    std::size_t operator()(absl::Span<const RawFrame> s) const {
      return absl::HashOf(absl::string_view(reinterpret_cast<const char*>(s.data()),
                                            s.size() * sizeof(RawFrame)));
    }
  };
  struct SpanEq {
    using is_transparent = void;
    bool operator()(absl::Span<const RawFrame> a, absl::Span<const RawFrame> b) const {
      return a.size() == b.size() &&
             (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(RawFrame)) == 0);
    }
  };
  struct Shard {
    mutable std::mutex mu;
    absl::flat_hash_map<std::vector<RawFrame>, std::uint32_t, SpanHash, SpanEq> ids;
  };
  std::uint32_t InternFrameLocked(const RawFrame& frame, const PythonNamer& namer);
  // Shard by a different mix of the hash than the map's own buckets use. The hash is
  // computed once per lookup and handed to the map too (a 30-frame stack is 480 bytes).
  Shard& ShardOf(std::size_t hash) const { return shards_[(hash >> 20) % kShards]; }

  mutable std::array<Shard, kShards> shards_;
  mutable std::mutex mu_;  // frames, ids and the pending queues
  absl::flat_hash_map<RawFrame, std::uint32_t> frame_ids_;
  using NamedKey = std::tuple<std::uint8_t, std::string, std::string, std::int32_t>;
  absl::flat_hash_map<NamedKey, std::uint32_t> named_ids_;
  std::uint32_t next_frame_id_ = 1;
  std::uint32_t next_stack_id_ = 1;
  std::vector<FrameDef> pending_frames_;   // native ones still unsymbolized (function "")
  std::vector<std::uint64_t> pending_pcs_; // parallel to pending_frames_: pc or 0
  std::vector<StackDef> pending_stacks_;
};

// "function+0x1f" in "libfoo.so" for a program counter, demangled; "0x7f..." where
// nothing is known.
void SymbolizeNative(std::uint64_t pc, std::string* function, std::string* filename);

}  // namespace gpumem
