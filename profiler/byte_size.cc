#include "profiler/byte_size.h"

#include <cmath>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace gpumem {

absl::StatusOr<std::uint64_t> ParseBytes(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  // Peel a unit: "GiB", "GB", "G" all mean 1024^3 here.
  std::uint64_t scale = 1;
  std::string lower = absl::AsciiStrToLower(t);
  absl::string_view unit = lower;
  absl::ConsumeSuffix(&unit, "ib") || absl::ConsumeSuffix(&unit, "b");
  if (!unit.empty()) {
    switch (unit.back()) {
      case 'k': scale = std::uint64_t{1} << 10; break;
      case 'm': scale = std::uint64_t{1} << 20; break;
      case 'g': scale = std::uint64_t{1} << 30; break;
      case 't': scale = std::uint64_t{1} << 40; break;
      default: break;
    }
    if (scale != 1) unit.remove_suffix(1);
  }
  double number = 0;
  if (unit.empty() || !absl::SimpleAtod(unit, &number) || !std::isfinite(number) ||
      number <= 0 || number * static_cast<double>(scale) >= 1.8e19) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a positive size"));
  }
  return static_cast<std::uint64_t>(number * static_cast<double>(scale));
}

}  // namespace gpumem
