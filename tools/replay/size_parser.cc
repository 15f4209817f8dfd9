#include "tools/replay/size_parser.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace gpumem::replay {
namespace {

struct Unit {
  const char* name;  // lower case
  std::uint64_t factor;
};

constexpr std::uint64_t kKi = 1024;
constexpr Unit kUnits[] = {
    {"", 1},          {"b", 1},
    {"k", 1000},      {"kb", 1000},              {"kib", kKi},
    {"m", 1000000},   {"mb", 1000000},           {"mib", kKi * kKi},
    {"g", 1000000000}, {"gb", 1000000000},       {"gib", kKi * kKi * kKi},
    {"t", 1000000000000}, {"tb", 1000000000000}, {"tib", kKi * kKi * kKi * kKi},
    {"p", 1000000000000000}, {"pb", 1000000000000000}, {"pib", kKi * kKi * kKi * kKi * kKi},
};

// Exact decimal arithmetic: "17.3GB" is 17300000000 bytes, not a double's neighbour.
__extension__ using Wide = unsigned __int128;
constexpr Wide kMaxBytes = ~std::uint64_t{0};

}  // namespace

absl::StatusOr<std::uint64_t> ParseSize(absl::string_view text) {
  auto error = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("bad size '", text, "': ", why,
                                                   " (examples: 17179869184, 16GiB, 17.3GB)"));
  };
  absl::string_view s = absl::StripAsciiWhitespace(text);
  std::size_t digits_end = 0;
  bool seen_dot = false;
  while (digits_end < s.size() &&
         (absl::ascii_isdigit(s[digits_end]) || (s[digits_end] == '.' && !seen_dot))) {
    seen_dot |= s[digits_end] == '.';
    ++digits_end;
  }
  absl::string_view number = s.substr(0, digits_end);
  if (number.empty() || number == ".") return error("no number");
  const std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s.substr(digits_end)));
  const Unit* found = nullptr;
  for (const Unit& u : kUnits) {
    if (unit == u.name) found = &u;
  }
  if (found == nullptr) return error(absl::StrCat("unknown unit '", unit, "'"));
  const std::size_t dot = number.find('.');
  absl::string_view whole = number.substr(0, dot);
  absl::string_view fraction =
      dot == absl::string_view::npos ? absl::string_view() : number.substr(dot + 1);
  if (fraction.size() > 18) return error("too many decimals");
  Wide numerator = 0;  // the number times 10^decimals
  Wide denominator = 1;
  for (absl::string_view part : {whole, fraction}) {
    for (char c : part) {
      numerator = numerator * 10 + static_cast<unsigned>(c - '0');
      if (numerator > kMaxBytes * Wide{1000000000000000000ULL}) return error("too large");
    }
  }
  for (std::size_t i = 0; i < fraction.size(); ++i) denominator *= 10;
  if (numerator / denominator > kMaxBytes) return error("too large");
  const Wide bytes = numerator / denominator * found->factor +
                     numerator % denominator * found->factor / denominator;
  if (bytes > kMaxBytes) return error("too large");
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace gpumem::replay
