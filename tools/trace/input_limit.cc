#include "tools/trace/input_limit.h"

#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace gpumem::trace {
namespace {

// "16GiB" -> 16 << 30; nullopt for anything else, or a value that does not fit 64 bits.
std::optional<std::uint64_t> ParseBinarySize(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (!absl::ConsumeSuffix(&text, "iB")) absl::ConsumeSuffix(&text, "B");
  int shift = 0;
  if (!text.empty()) {
    const char unit = absl::ascii_toupper(static_cast<unsigned char>(text.back()));
    for (auto [letter, bits] : {std::pair{'K', 10}, {'M', 20}, {'G', 30}, {'T', 40}}) {
      if (unit == letter) shift = bits;
    }
    if (shift != 0) text.remove_suffix(1);
  }
  std::uint64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n == 0 || n > (~std::uint64_t{0} >> shift)) {
    return std::nullopt;
  }
  return n << shift;
}

}  // namespace

absl::StatusOr<std::uint64_t> MaxInputBytes() {
  const char* value = std::getenv(kMaxInputVariable);
  if (value == nullptr || *value == '\0') return kDefaultMaxInputBytes;
  std::optional<std::uint64_t> bytes = ParseBinarySize(value);
  if (!bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        kMaxInputVariable, "='", value, "' is not a size (bytes, or a number with K, M, G or T)"));
  }
  return *bytes;
}

std::string DescribeBytes(std::uint64_t bytes) {
  for (auto [unit, bits] : {std::pair{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}}) {
    if (bytes >= (std::uint64_t{1} << bits) && bytes % (std::uint64_t{1} << bits) == 0) {
      return absl::StrCat(bytes >> bits, " ", unit);
    }
  }
  return absl::StrCat(bytes, " bytes");
}

}  // namespace gpumem::trace
