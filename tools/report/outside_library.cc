#include "tools/report/outside_library.h"

#include "absl/strings/match.h"

namespace gpumem::report {

bool IsDriverCall(const trace::Trace& trace, std::uint32_t stack) {
  if (stack >= trace.stacks.size() || trace.stacks[stack].empty()) return false;
  const std::uint32_t f = trace.stacks[stack].front();
  return f < trace.frames.size() && absl::StartsWith(trace.frames[f].filename, "[cuda-");
}

OutsideLibrary LibraryOfStack(const trace::Trace& trace, std::uint32_t stack) {
  if (stack >= trace.stacks.size()) return OutsideLibrary::kUnknown;
  for (std::uint32_t id : trace.stacks[stack]) {
    if (id >= trace.frames.size()) continue;
    const trace::Frame& frame = trace.frames[id];
    const OutsideLibrary library = LibraryOfFrame(frame.filename, frame.line);
    if (library != OutsideLibrary::kUnknown) return library;
  }
  return OutsideLibrary::kUnknown;
}

}  // namespace gpumem::report
