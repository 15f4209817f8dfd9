#include "tools/report/sites.h"

#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::report {

bool IsLibraryFrame(const trace::Frame& frame) { return IsLibraryFile(frame.filename); }

std::string FrameName(const trace::Frame& frame) {
  return absl::StrCat(frame.filename, ":", frame.line, " ", frame.function);
}

namespace {

// The part of `file` after its last package folder, if it is in one.
std::optional<absl::string_view> InPackage(absl::string_view file) {
  std::optional<absl::string_view> rest;
  for (absl::string_view mark : {"site-packages/", "dist-packages/"}) {
    const std::size_t at = file.rfind(mark);
    if (at != absl::string_view::npos && (!rest || file.size() - at - mark.size() < rest->size())) {
      rest = file.substr(at + mark.size());
    }
  }
  return rest;
}

}  // namespace

std::string DisplayPath(absl::string_view file, absl::string_view common_dir) {
  if (std::optional<absl::string_view> rest = InPackage(file)) return std::string(*rest);
  if (!common_dir.empty() && absl::StartsWith(file, common_dir) && file.size() > common_dir.size()) {
    return std::string(file.substr(common_dir.size()));
  }
  return std::string(file);
}

std::string CommonDir(const std::vector<absl::string_view>& files) {
  std::optional<absl::string_view> common;
  for (absl::string_view file : files) {
    if (!absl::StartsWith(file, "/") || InPackage(file)) continue;
    const absl::string_view dir = file.substr(0, file.rfind('/') + 1);
    if (!common) {
      common = dir;
      continue;
    }
    std::size_t n = 0;
    while (n < common->size() && n < dir.size() && (*common)[n] == dir[n]) ++n;
    *common = common->substr(0, common->rfind('/', n == 0 ? 0 : n - 1) + 1);
  }
  if (!common || *common == "/") return "";
  return std::string(*common);
}

SiteTable::SiteTable(const trace::Trace& trace) {
  sites_.push_back(Site{"<no Python frames>", 0, 0});
  absl::flat_hash_map<std::uint32_t, std::uint32_t> site_of_frame;
  site_of_stack_.resize(trace.stacks.size(), 0);
  for (std::uint32_t s = 0; s < trace.stacks.size(); ++s) {
    const std::vector<std::uint32_t>& stack = trace.stacks[s];
    if (stack.empty()) continue;
    // Innermost user frame; if the whole stack is library code, its innermost frame.
    std::uint32_t chosen = stack.front();
    for (std::uint32_t f : stack) {
      if (!IsLibraryFrame(trace.frames[f])) {
        chosen = f;
        break;
      }
    }
    auto [it, inserted] = site_of_frame.try_emplace(chosen, sites_.size());
    if (inserted) sites_.push_back(Site{"", chosen, s});
    site_of_stack_[s] = it->second;
  }
  // Names once every site is known: they are shown relative to the folder they share.
  std::vector<absl::string_view> files;
  for (std::size_t i = 1; i < sites_.size(); ++i) files.push_back(trace.frames[sites_[i].frame].filename);
  common_dir_ = CommonDir(files);
  for (std::size_t i = 1; i < sites_.size(); ++i) sites_[i].name = Label(trace.frames[sites_[i].frame]);
}

std::string SiteTable::Label(const trace::Frame& f) const {
  return absl::StrCat(DisplayPath(f.filename, common_dir_), ":", f.line, " ", f.function);
}

std::optional<std::uint32_t> CallApart(const trace::Trace& trace, std::uint32_t kept,
                                       std::uint32_t other) {
  const std::vector<std::uint32_t>& frames = trace.stacks[kept];
  const std::optional<std::size_t> at = CallApart(
      frames, trace.stacks[other],
      [&](std::uint32_t f) { return IsLibraryFrame(trace.frames[f]); },
      [](std::uint32_t a, std::uint32_t b) { return a == b; });
  if (!at) return std::nullopt;
  if (other == 0 && CallerTellsNothing(trace.frames[frames[*at]].function)) return std::nullopt;
  return frames[*at];
}

Keeper KeeperOfStack(const trace::Trace& trace, std::uint32_t stack) {
  if (stack >= trace.stacks.size()) return Keeper::kNone;
  std::vector<trace::Frame> frames;
  for (std::uint32_t f : trace.stacks[stack]) frames.push_back(trace.frames[f]);
  return KeeperInside(frames);
}

}  // namespace gpumem::report
