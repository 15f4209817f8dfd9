// libFuzzer target for the gpumem trace reader: any bytes must give a trace or a one-line
// error, never a crash. Seeds: tests/fuzz/gpumem_corpus (tests/fuzz/run.sh gpumem). Built with clang only (-fsanitize=fuzzer); the gcc CI runs the
// fixed-seed mutation test in trace_recovery_test instead.
//   clang++ -fsanitize=fuzzer,address ... && ./gpumem_reader_fuzzer -max_total_time=60
#include <cstddef>
#include <cstdint>
#include <string>

#include "profiler/journal_format.h"
#include "profiler/trace_format.h"
#include "tools/trace/gpumem_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Most inputs would fail the magic check: give the fuzzer a valid prefix for free.
  std::string bytes = gpumem::format::FilePrefix();
  namespace format = gpumem::format;
  if (size > 0 && data[0] % 2 == 1) {
    // Odd first byte: the rest is a records payload, wrapped in a chunk with a valid
    // checksum so the fuzzer reaches the record decoder (CRCs would stop it otherwise).
    format::AppendChunk(&bytes, format::ChunkKind::kRecords, 0,
                        absl::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  } else if (size > 1 && data[0] % 4 == 2) {
    // First byte 2 mod 4: a killed run's journal. The second byte is the region's journal
    // mark; the rest fills the region's slots (64 bytes each), so the fuzzer reaches the
    // journal recovery with a valid region header.
    std::string marks;
    marks.push_back(static_cast<char>(format::RecordType::kJournalMark));
    format::PutVarint(&marks, 0);
    format::PutVarint(&marks, data[1]);
    format::AppendChunk(&bytes, format::ChunkKind::kRecords, 0, marks);
    const std::size_t n = size - 2;
    const auto capacity = static_cast<std::uint32_t>(
        n / format::kJournalRecordBytes + (n % format::kJournalRecordBytes != 0 ? 1 : 0));
    if (capacity > 0) {
      format::AppendJournalChunkHead(&bytes, 1, 0, capacity, 0);
      bytes.append(reinterpret_cast<const char*>(data) + 2, n);
      bytes.append(std::size_t{capacity} * format::kJournalRecordBytes - n, '\0');
    }
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
