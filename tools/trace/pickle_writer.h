// A streaming pickle writer (protocol 4) for plain data, using only the opcodes PyTorch's
// own memory snapshots contain, so that every reader of those (Python's pickle, PyTorch's
// memory_viz) reads ours. Strings are memoized: a repeated string costs a memo reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace gpumem::trace {

class PickleWriter {
 public:
  PickleWriter();  // writes PROTO 4

  void None();
  void Bool(bool value);
  void Int(std::int64_t value);
  void Uint(std::uint64_t value);
  void Float(double value);
  void String(absl::string_view value);

  // Containers: Begin, then the items (a dict's as key, value, key, value...), then End.
  // Items go in batches of 1,000 per APPENDS / SETITEMS, as Python's pickler writes them:
  // memory_viz passes a batch as the arguments of one JavaScript call, which has a limit.
  void BeginList();
  void EndList();
  void BeginDict();
  void EndDict();
  // A 2-tuple of ints (TUPLE2).
  void IntPair(std::int64_t first, std::int64_t second);

  // Remembers the value just written (a string, or a container after its End); Get writes
  // a reference to it again.
  std::uint32_t Memoize();
  void Get(std::uint32_t memo_index);

  // STOP; the writer is spent after this.
  std::string Finish() &&;

 private:
  void Op(unsigned char op) { out_.push_back(static_cast<char>(op)); }
  // Called before each value: closes a full batch of the enclosing container.
  void BeforeValue();
  void AfterValue() {
    if (!open_.empty()) ++open_.back().items;
  }
  void WriteInt(std::int64_t value);
  void WriteUint(std::uint64_t value);

  struct Open {
    bool dict;
    std::uint32_t items;  // values written in the present batch (keys count too)
  };
  std::vector<Open> open_;
  void LittleEndian(std::uint64_t value, int bytes);

  std::string out_;
  std::uint32_t memo_size_ = 0;
  absl::flat_hash_map<std::string, std::uint32_t> strings_;
};

}  // namespace gpumem::trace
