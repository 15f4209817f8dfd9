#include "profiler/graph_pool_note.h"

#include <array>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gpumem::format {
namespace {

struct ChangeName {
  GraphPoolChange change;
  absl::string_view name;
};
constexpr std::array<ChangeName, 3> kChangeNames = {{
    {GraphPoolChange::kCaptureBegins, "capture begins"},
    {GraphPoolChange::kCaptureEnds, "capture ends"},
    {GraphPoolChange::kReleased, "released"},
}};

}  // namespace

std::string GraphPoolNoteText(const GraphPoolNote& note) {
  absl::string_view name;
  for (const ChangeName& c : kChangeNames) {
    if (c.change == note.change) name = c.name;
  }
  return absl::StrCat(kGraphPoolNotePrefix, note.pool.first, ".", note.pool.second, ": ", name);
}

std::optional<GraphPoolNote> ParseGraphPoolNote(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, kGraphPoolNotePrefix)) return std::nullopt;
  const std::vector<absl::string_view> parts = absl::StrSplit(text, absl::MaxSplits(": ", 1));
  if (parts.size() != 2) return std::nullopt;
  const std::vector<absl::string_view> id = absl::StrSplit(parts[0], '.');
  GraphPoolNote note;
  if (id.size() != 2 || !absl::SimpleAtoi(id[0], &note.pool.first) ||
      !absl::SimpleAtoi(id[1], &note.pool.second)) {
    return std::nullopt;
  }
  for (const ChangeName& c : kChangeNames) {
    if (c.name == parts[1]) {
      note.change = c.change;
      return note;
    }
  }
  return std::nullopt;
}

std::uint32_t GraphPoolNumbers::Number(std::int32_t device, const GraphPoolNote& note) {
  if (note.change == GraphPoolChange::kCaptureBegins && note.pool == kNewGraphPool) {
    unnamed_[device] = next_;
    return next_++;
  }
  if (note.change == GraphPoolChange::kCaptureEnds) {
    if (auto it = unnamed_.find(device); it != unnamed_.end()) {
      const std::uint32_t number = it->second;
      unnamed_.erase(it);
      if (note.pool != kNewGraphPool) numbers_[{device, note.pool}] = number;
      return number;
    }
  }
  const auto [it, added] = numbers_.try_emplace({device, note.pool}, next_);
  if (added) ++next_;
  return it->second;
}

}  // namespace gpumem::format
