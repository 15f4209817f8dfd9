// libFuzzer target for the gpumem trace reader: any bytes must give a trace or a one-line
// error, never a crash. Built with clang only (-fsanitize=fuzzer); the gcc CI runs the
// fixed-seed mutation test in trace_recovery_test instead.
//   clang++ -fsanitize=fuzzer,address ... && ./gpumem_reader_fuzzer -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <string>

#include "profiler/trace_format.h"
#include "tools/trace/gpumem_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Most inputs would fail the magic check: give the fuzzer a valid prefix for free.
  std::string bytes = gpumem::format::FilePrefix();
  if (size > 0 && data[0] % 2 == 1) {
    // Odd first byte: the rest is a records payload, wrapped in a chunk with a valid
    // checksum so the fuzzer reaches the record decoder (CRCs would stop it otherwise).
    gpumem::format::AppendChunk(
        &bytes, gpumem::format::ChunkKind::kRecords, 0,
        absl::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  } else {
    bytes.append(reinterpret_cast<const char*>(data), size);
  }
  auto trace = gpumem::trace::ParseGpumemTrace(bytes, "fuzz.gpumem");
  if (trace.ok()) {
    for (const auto& e : trace->events) {
      if (e.stack_id >= trace->stacks.size()) __builtin_trap();
    }
    for (const auto& stack : trace->stacks) {
      for (std::uint32_t f : stack) {
        if (f >= trace->frames.size()) __builtin_trap();
      }
    }
  } else if (trace.status().message().find('\n') != std::string::npos) {
    __builtin_trap();
  }
  return 0;
}
