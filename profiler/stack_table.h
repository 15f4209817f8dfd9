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

// A stack's hash, one frame at a time, innermost first: Find(frames, n, hash) takes it from
// a caller that read the frames itself. Each frame is mixed on its own (in parallel with
// reading the next one) and chained by one multiply; the finish is murmur3's.
class FrameHasher {
 public:
  void Add(const RawFrame& f) {
    const std::uint64_t m =
        (f.a ^ ((std::uint64_t{f.b} << 32 | f.tag) * 0x9E3779B97F4A7C15ull)) *
        0xC2B2AE3D27D4EB4Full;
    h_ = (h_ ^ m) * 0xFF51AFD7ED558CCDull;
  }
  std::size_t Finish(std::size_t n) const {
    std::uint64_t x = h_ ^ n;
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ull;
    x ^= x >> 33;
    return static_cast<std::size_t>(x);
  }

 private:
  std::uint64_t h_ = 0x243F6A8885A308D3ull;
};

inline std::size_t HashFrames(const RawFrame* frames, std::size_t n) {
  FrameHasher h;
  for (std::size_t i = 0; i < n; ++i) h.Add(frames[i]);
  return h.Finish(n);
}

// Fills a new Python frame's file, function and (for kPythonLastiTag) line; called on
// the capturing thread, once per new frame, while the interpreter state is safe to read.
struct FrameDef;
using PythonNamer = void (*)(const RawFrame& frame, FrameDef* def);

class StackTable {
 public:
  StackTable();
  StackTable(const StackTable&) = delete;
  StackTable& operator=(const StackTable&) = delete;

  // Id of the stack (innermost frame first); 0 for an empty stack.
  std::uint32_t Intern(const RawFrame* frames, std::size_t n,
                       const PythonNamer& namer = nullptr);
  // Id of a stack interned before; 0 if it never was. Adds nothing, names nothing.
  std::uint32_t Find(const RawFrame* frames, std::size_t n) const {
    return Find(frames, n, HashFrames(frames, n));
  }
  // The same, with `hash` = HashFrames(frames, n) made by the caller.
  std::uint32_t Find(const RawFrame* frames, std::size_t n, std::size_t hash) const;
  // A frame known by its names (an API entry point, a test frame).
  std::uint32_t InternNamedFrame(format::FrameKind kind, const std::string& function,
                                 const std::string& filename, std::int32_t line);

  // How far one reader of the definitions (a trace file) has taken them: every file gets
  // every definition once, so a ring trace's new segment starts from the first.
  struct DefinitionCursor {
    std::uint32_t frames = 1;  // the next frame id to take
    std::uint32_t stacks = 1;  // the next stack id to take
  };
  // Definitions made since `cursor`, native frames symbolized; advances it.
  void TakeSince(DefinitionCursor* cursor, std::vector<FrameDef>* frames,
                 std::vector<StackDef>* stacks);
  // TakeSince with the table's own cursor.
  void TakePending(std::vector<FrameDef>* frames, std::vector<StackDef>* stacks);

  std::size_t stack_count() const;

  // The frames of stack `id`, innermost first, named (native ones symbolized now): for
  // naming a site in the running process. Empty for an unknown id.
  struct NamedFrame {
    std::string filename;
    std::string function;
    std::int32_t line = 0;
  };
  std::vector<NamedFrame> Frames(std::uint32_t id) const;

 private:
  static constexpr std::size_t kShards = 16;
  // Looked up by span, so a known stack costs no allocation. Hashed with FrameHasher,
  // which the Python walk folds in as it reads the frames (a known stack is not read a
  // second time to hash it).
  static_assert(std::has_unique_object_representations_v<RawFrame>);
  struct SpanHash {
    using is_transparent = void;
    std::size_t operator()(absl::Span<const RawFrame> s) const {
      return HashFrames(s.data(), s.size());
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
  // Names this table in the threads' caches of stacks they found (stack_table.cc), which
  // are read before any lock; never reused, so a cache never answers for a table that
  // is gone.
  const std::uint64_t serial_;
  mutable std::mutex mu_;  // frames, ids, the kept definitions and own_cursor_
  absl::flat_hash_map<RawFrame, std::uint32_t> frame_ids_;
  using NamedKey = std::tuple<std::uint8_t, std::string, std::string, std::int32_t>;
  absl::flat_hash_map<NamedKey, std::uint32_t> named_ids_;
  std::uint32_t next_frame_id_ = 1;
  std::uint32_t next_stack_id_ = 1;
  DefinitionCursor own_cursor_;  // TakePending's
  // Every definition, by id, for the cursors and Frames(): each stack's frame ids and each
  // frame's kind and names (a native frame's pc, symbolized when taken or asked).
  std::vector<std::vector<std::uint32_t>> stack_frames_;
  struct KeptFrame {
    NamedFrame names;
    std::uint64_t pc = 0;
    format::FrameKind kind = format::FrameKind::kNative;
  };
  std::vector<KeptFrame> frames_;
  void KeepFrameLocked(const FrameDef& def, std::uint64_t pc);
};

// "function+0x1f" in "libfoo.so" for a program counter, demangled; "0x7f..." where
// nothing is known.
void SymbolizeNative(std::uint64_t pc, std::string* function, std::string* filename);

}  // namespace gpumem
