// libFuzzer target for the .tsv trace reader, both ways in: the whole text at once and
// streamed in small pieces (lines cut across pieces). Any input may be refused; none may
// crash or hang, an error is one line, and both ways agree on the verdict.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tools/trace/decompress.h"
#include "tools/trace/tsv_reader.h"

namespace {

// Every event's stack id points into the trace's stacks, every stack's frames into frames.
bool Consistent(const gpumem::trace::Trace& t) {
  for (const auto& e : t.events) {
    if (e.stack_id >= t.stacks.size()) return false;
  }
  for (const auto& stack : t.stacks) {
    for (std::uint32_t f : stack) {
      if (f >= t.frames.size()) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto whole = gpumem::trace::ParseTsvTrace(text, "fuzz.tsv");
  if (!whole.ok()) {
    if (whole.status().message().find('\n') != std::string::npos) __builtin_trap();
  } else if (!Consistent(*whole)) {
    __builtin_trap();
  }
  // The way files are read: through the decompressing reader (which takes input with a
  // compressor's magic for compressed; the decompressor targets fuzz those).
  auto reader = gpumem::trace::DecompressingReader::FromBytes(text, "fuzz.tsv");
  if (reader->codec_name() != std::string("none")) return 0;
  auto streamed = gpumem::trace::ReadTsvTrace(*reader);
  if (whole.ok() != streamed.ok()) __builtin_trap();
  if (whole.ok() && whole->events.size() != streamed->events.size()) __builtin_trap();
  return 0;
}
