// Byte sizes as people write them on a command line: "17179869184", "16GiB", "17.3GB",
// "512MiB", "1.5TB", "64K". Decimal units (kB, MB, GB, TB, PB; K/M/G/T/P alone) are
// powers of 1000, binary ones (KiB, MiB, GiB, TiB, PiB) powers of 1024; a trailing "B"
// alone means bytes. Case-insensitive, spaces between number and unit allowed.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumem::replay {

// InvalidArgument naming the text for anything else (negative, empty, unknown unit, a
// fraction of a byte left over is rounded down, overflow).
absl::StatusOr<std::uint64_t> ParseSize(absl::string_view text);

}  // namespace gpumem::replay
