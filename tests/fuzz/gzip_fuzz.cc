// libFuzzer target for the gzip decompressor (tests/fuzz/decompress_fuzz.h).
#include "tests/fuzz/decompress_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr absl::string_view kMagic("\x1F\x8B", 2);
  return gpumem::trace::FuzzDecompressor(kMagic, "gzip", data, size);
}
