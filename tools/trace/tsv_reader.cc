#include "tools/trace/tsv_reader.h"

#include <cctype>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tools/trace/frame_table.h"

namespace gpumem::trace {
namespace {

// "file:line:function": the line is the first all-digit field between colons, so
// Windows drive letters and C++ names with "::" survive.
bool ParseFrame(absl::string_view text, Frame* frame) {
  for (std::size_t colon = text.find(':'); colon != absl::string_view::npos;
       colon = text.find(':', colon + 1)) {
    std::size_t end = text.find(':', colon + 1);
    if (end == absl::string_view::npos) return false;
    absl::string_view digits = text.substr(colon + 1, end - colon - 1);
    if (!digits.empty() && absl::SimpleAtoi(digits, &frame->line)) {
      frame->filename = std::string(text.substr(0, colon));
      frame->function = std::string(text.substr(end + 1));
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<Trace> ParseTsvTrace(absl::string_view text, const std::string& name) {
  Trace trace;
  trace.source = name;
  trace.format = "tsv";
  FrameTable frames(&trace);
  // Stack ids in the file are the file's own; map them to ours once all S lines are read.
  std::vector<std::uint32_t> file_stack_of_event;
  absl::flat_hash_map<std::uint64_t, std::uint32_t> stack_ids;
  std::size_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line[0] == '#') continue;
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": line ", line_no, ": ", what));
    };
    std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
    if (f[0] == "S") {
      std::uint64_t id;
      if (f.size() != 3 || !absl::SimpleAtoi(f[1], &id)) return error("bad stack line");
      std::vector<std::uint32_t> ids;
      if (!f[2].empty()) {
        for (absl::string_view part : absl::StrSplit(f[2], " | ")) {
          Frame frame;
          if (!ParseFrame(part, &frame)) return error(absl::StrCat("bad frame '", part, "'"));
          ids.push_back(frames.Intern(frame));
        }
      }
      stack_ids[id] = frames.InternStack(ids);
      continue;
    }
    if (f.size() != 7) return error(absl::StrCat("expected 7 tab-separated fields, found ", f.size()));
    Event e;
    std::optional<Action> action = ParseAction(f[1]);
    if (!action) return error(absl::StrCat("unknown action '", f[1], "'"));
    e.action = *action;
    std::uint64_t stack;
    if (!absl::SimpleAtoi(f[2], &e.addr) || !absl::SimpleAtoi(f[3], &e.size) ||
        !absl::SimpleAtoi(f[4], &e.stream) || !absl::SimpleAtoi(f[5], &e.time_us) ||
        !absl::SimpleAtoi(f[6], &stack)) {
      return error("a numeric field is not a number");
    }
    if (e.action == Action::kOom) e.device_free = e.addr;
    file_stack_of_event.push_back(static_cast<std::uint32_t>(stack));
    trace.events.push_back(e);
  }
  std::size_t missing = 0;
  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    auto it = stack_ids.find(file_stack_of_event[i]);
    if (it == stack_ids.end()) {
      ++missing;
    } else {
      trace.events[i].stack_id = it->second;
    }
  }
  if (missing) {
    trace.warnings.push_back(absl::StrCat(missing, " events name a stack the file does not define"));
  }
  return trace;
}

}  // namespace gpumem::trace
