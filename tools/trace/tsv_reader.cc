#include "tools/trace/tsv_reader.h"

#include <array>
#include <charconv>
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

// Splits `line` at tabs without allocating: the first `fields.size()` pieces are stored,
// and the count of all pieces is returned.
std::size_t SplitTabs(absl::string_view line, std::array<absl::string_view, 8>& fields) {
  std::size_t n = 0;
  while (true) {
    std::size_t tab = line.find('\t');
    if (n < fields.size()) fields[n] = line.substr(0, tab);
    ++n;
    if (tab == absl::string_view::npos) return n;
    line.remove_prefix(tab + 1);
  }
}

// The event columns are plain decimal integers: from_chars is several times faster than
// the locale-free general parsers, which matters for traces of millions of lines.
template <typename T>
bool ParseInt(absl::string_view text, T* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end && !text.empty();
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
    std::array<absl::string_view, 8> f;
    std::size_t count = SplitTabs(line, f);
    if (f[0] == "S") {
      std::uint64_t id;
      if (count != 3 || !ParseInt(f[1], &id)) return error("bad stack line");
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
    if (count != 7) return error(absl::StrCat("expected 7 tab-separated fields, found ", count));
    Event e;
    std::optional<Action> action = ParseAction(f[1]);
    if (!action) return error(absl::StrCat("unknown action '", f[1], "'"));
    e.action = *action;
    std::uint64_t stack;
    if (!ParseInt(f[2], &e.addr) || !ParseInt(f[3], &e.size) || !ParseInt(f[4], &e.stream) ||
        !ParseInt(f[5], &e.time_us) || !ParseInt(f[6], &stack)) {
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
