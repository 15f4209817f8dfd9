// libFuzzer target for the zstd decompressor (tests/fuzz/decompress_fuzz.h).
#include "tests/fuzz/decompress_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr absl::string_view kMagic("\x28\xB5\x2F\xFD", 4);
  return gpumem::trace::FuzzDecompressor(kMagic, "zstd", data, size);
}
