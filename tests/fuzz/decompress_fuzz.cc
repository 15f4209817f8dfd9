#include "tests/fuzz/decompress_fuzz.h"

#include <string>

#include "absl/strings/match.h"
#include "tools/trace/decompress.h"

namespace gpumem::trace {

// Small enough that a bomb costs milliseconds, large enough for the seeds to pass whole.
constexpr std::uint64_t kFuzzOutputLimit = 1 << 20;

int FuzzDecompressor(absl::string_view magic, absl::string_view codec, const std::uint8_t* data,
                     std::size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  if (!absl::StartsWith(input, magic)) input.insert(0, magic.data(), magic.size());
  auto reader = DecompressingReader::FromBytes(std::move(input), "fuzz.z");
  reader->set_max_bytes(kFuzzOutputLimit);
  if (reader->codec_name() != codec) __builtin_trap();
  std::uint64_t out = 0;
  while (true) {
    absl::StatusOr<absl::string_view> piece = reader->Next();
    if (!piece.ok()) {
      const std::string message(piece.status().message());
      if (message.find('\n') != std::string::npos || !absl::StartsWith(message, "fuzz.z: ")) {
        __builtin_trap();
      }
      return 0;
    }
    if (piece->empty()) break;
    out += piece->size();
    if (out > kFuzzOutputLimit) __builtin_trap();  // the limit did not hold
  }
  return 0;
}

}  // namespace gpumem::trace
