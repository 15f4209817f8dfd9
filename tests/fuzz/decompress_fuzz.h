// The body of the decompressor fuzz targets (one per codec: xz, gzip, zstd).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace gpumem::trace {

// Feeds `data`, behind `magic` when it does not already start with it (so the reader picks
// the codec under test), through DecompressingReader under a small output limit. Traps when
// an error is not one line naming the input, when more than the limit comes out, or when
// the codec chosen is not `codec`.
int FuzzDecompressor(absl::string_view magic, absl::string_view codec, const std::uint8_t* data,
                     std::size_t size);

}  // namespace gpumem::trace
