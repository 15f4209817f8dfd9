#include "profiler/process_note.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace gpumem::format {
namespace {

bool ParseOthers(absl::string_view text, std::vector<ProcessBytes>* out) {
  if (text.empty()) return true;
  for (absl::string_view entry : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    ProcessBytes p;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &p.pid) ||
        !absl::SimpleAtoi(parts[1], &p.bytes)) {
      return false;
    }
    out->push_back(p);
  }
  return true;
}

}  // namespace

std::string ProcessNoteText(const ProcessNote& note) {
  const DeviceProcesses& p = note.processes;
  return absl::StrCat(kProcessNotePrefix, "step=", note.step,
                      " self=", p.self ? absl::StrCat(*p.self) : "?", " others=",
                      absl::StrJoin(p.others, ",", [](std::string* out, const ProcessBytes& o) {
                        absl::StrAppend(out, o.pid, ":", o.bytes);
                      }));
}

std::optional<ProcessNote> ParseProcessNote(absl::string_view text) {
  if (!absl::ConsumePrefix(&text, kProcessNotePrefix)) return std::nullopt;
  const std::vector<absl::string_view> fields = absl::StrSplit(text, ' ');
  if (fields.size() != 3) return std::nullopt;
  absl::string_view step = fields[0], self = fields[1], others = fields[2];
  ProcessNote note;
  if (!absl::ConsumePrefix(&step, "step=") || !absl::SimpleAtoi(step, &note.step) ||
      !absl::ConsumePrefix(&self, "self=") || !absl::ConsumePrefix(&others, "others=") ||
      !ParseOthers(others, &note.processes.others)) {
    return std::nullopt;
  }
  if (self != "?") {
    std::uint64_t bytes = 0;
    if (!absl::SimpleAtoi(self, &bytes)) return std::nullopt;
    note.processes.self = bytes;
  }
  return note;
}

}  // namespace gpumem::format
