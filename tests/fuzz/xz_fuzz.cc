// libFuzzer target for the xz decompressor (tests/fuzz/decompress_fuzz.h).
#include "tests/fuzz/decompress_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr absl::string_view kMagic("\xFD" "7zXZ\x00", 6);
  return gpumem::trace::FuzzDecompressor(kMagic, "xz", data, size);
}
