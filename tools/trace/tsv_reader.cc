#include "tools/trace/tsv_reader.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tools/trace/backward_caller.h"
#include "tools/trace/event_buffer.h"
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

// Longer lines are refused: a real stack line holds a few kB, and a file with no newline
// (binary data, /dev/zero) would otherwise be held whole while looking for one.
constexpr std::size_t kMaxLineBytes = 1 << 20;

// Control bytes other than tab (and the \r of a CRLF line) never occur in a text trace.
std::optional<std::size_t> FirstBinaryByte(absl::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) return i;
  }
  return std::nullopt;
}

// One line at a time, in file order, from whichever source.
class TsvParser {
 public:
  explicit TsvParser(const std::string& name) : name_(name), frames_(&trace_) {
    trace_.source = name;
    trace_.format = "tsv";
  }

  // Splits `piece` into lines; a line cut at the end is kept until the next piece.
  absl::Status Feed(absl::string_view piece) {
    bytes_ += piece.size();
    if (!carry_.empty()) {
      const std::size_t nl = piece.find('\n');
      if (nl == absl::string_view::npos) {
        if (absl::Status s = CheckCarry(piece.size()); !s.ok()) return s;
        carry_.append(piece.data(), piece.size());
        return absl::OkStatus();
      }
      if (absl::Status s = CheckCarry(nl); !s.ok()) return s;
      carry_.append(piece.data(), nl);
      piece.remove_prefix(nl + 1);
      absl::Status s = Line(carry_);
      carry_.clear();
      if (!s.ok()) return s;
    }
    while (!piece.empty()) {
      const std::size_t nl = piece.find('\n');
      if (nl == absl::string_view::npos) {
        carry_.assign(piece.data(), piece.size());
        if (absl::Status s = CheckCarry(0); !s.ok()) return s;
        break;
      }
      if (absl::Status s = Line(piece.substr(0, nl)); !s.ok()) return s;
      piece.remove_prefix(nl + 1);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Trace> Finish() {
    // Every line a writer ends has its newline: a last line without one was cut (its last
    // number may read as a smaller one), so it is left out and the loss said.
    if (!carry_.empty()) {
      if (auto binary = FirstBinaryByte(carry_)) return NotText(*binary);
      DescribeCut();
    }
    events_.MoveTo(&trace_.events);
    // Until now stack_id held the file's own id: map it to ours.
    std::size_t missing = 0;
    for (Event& e : trace_.events) {
      auto it = stack_ids_.find(e.stack_id);
      if (it == stack_ids_.end()) {
        ++missing;
        e.stack_id = 0;
      } else {
        e.stack_id = it->second;
      }
    }
    if (missing) {
      trace_.warnings.push_back(
          absl::StrCat(missing, " events name a stack the file does not define"));
    }
    AttributeToBackwardCaller(&trace_);  // the snapshot's events, flattened
    return std::move(trace_);
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": line ", line_no_, ": ", what));
  }
  absl::Status NotText(std::size_t column) const {
    return Error(absl::StrCat("binary data at byte ", column + 1,
                              ": not a .tsv trace (nor a gpumem trace or snapshot pickle)"));
  }
  // The unfinished line (carry_) grows by `more` bytes: refused past kMaxLineBytes.
  absl::Status CheckCarry(std::size_t more) const {
    if (carry_.size() + more <= kMaxLineBytes) return absl::OkStatus();
    if (auto binary = FirstBinaryByte(carry_)) return NotText(*binary);
    return absl::InvalidArgumentError(absl::StrCat(name_, ": line ", line_no_ + 1,
                                                   " is longer than ", kMaxLineBytes,
                                                   " bytes: not a .tsv trace"));
  }
  void DescribeCut() {
    TraceLoss loss;
    loss.events_kept = events_.size();
    loss.last_event_us = last_time_us_;
    loss.file_bytes = bytes_;
    loss.bytes_lost = carry_.size();
    loss.bytes_kept = bytes_ - carry_.size();
    loss.data_end = loss.bytes_kept;
    loss.summary = absl::StrCat(name_, ": the file ends inside line ", line_no_ + 1,
                                " (no newline after it): cut there; kept the ", events_.size(),
                                " events before it, lost ", carry_.size(), " bytes");
    trace_.warnings.insert(trace_.warnings.begin(), loss.summary);
    trace_.loss = std::move(loss);
  }

  absl::Status Line(absl::string_view line) {
    ++line_no_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (auto binary = FirstBinaryByte(line)) return NotText(*binary);
    if (line.size() > kMaxLineBytes) {
      return Error(absl::StrCat("longer than ", kMaxLineBytes, " bytes: not a .tsv trace"));
    }
    if (line.empty() || line[0] == '#') return absl::OkStatus();
    auto error = [&](absl::string_view what) { return Error(what); };
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
          ids.push_back(frames_.Intern(frame));
        }
      }
      stack_ids_[static_cast<std::uint32_t>(id)] = frames_.InternStack(ids);
      return absl::OkStatus();
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
    // An OOM row's address column is the device's free bytes; a gpumem trace's OOM address
    // is the headroom that refused it, which a .tsv does not record.
    if (e.action == Action::kOom) {
      e.device_free = e.addr;
      e.addr = 0;
    }
    e.stack_id = static_cast<std::uint32_t>(stack);  // the file's id until Finish()
    events_.push_back(e);
    last_time_us_ = e.time_us;
    return absl::OkStatus();
  }

  const std::string& name_;
  Trace trace_;
  FrameTable frames_;
  EventBuffer events_;
  absl::flat_hash_map<std::uint32_t, std::uint32_t> stack_ids_;  // the file's -> ours
  std::string carry_;
  std::size_t line_no_ = 0;
  std::uint64_t bytes_ = 0;  // text fed so far
  std::int64_t last_time_us_ = 0;
};

}  // namespace

absl::StatusOr<Trace> ParseTsvTrace(absl::string_view text, const std::string& name) {
  TsvParser parser(name);
  if (absl::Status s = parser.Feed(text); !s.ok()) return s;
  return parser.Finish();
}

absl::StatusOr<Trace> ReadTsvTrace(DecompressingReader& reader, const ReadProgress& progress) {
  TsvParser parser(reader.name());
  // Report every ~1% of the input: the callback redraws a terminal line.
  const std::uint64_t step = std::max<std::uint64_t>(reader.total() / 100, 1);
  std::uint64_t next_report = step;
  while (true) {
    absl::StatusOr<absl::string_view> piece = reader.Next();
    if (!piece.ok()) return piece.status();
    if (piece->empty()) break;
    if (absl::Status s = parser.Feed(*piece); !s.ok()) return s;
    if (progress && reader.total() > 0 && reader.consumed() >= next_report) {
      progress(static_cast<double>(reader.consumed()) / static_cast<double>(reader.total()));
      next_report = reader.consumed() + step;
    }
  }
  return parser.Finish();
}

}  // namespace gpumem::trace
