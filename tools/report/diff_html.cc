// `gpumem diff --html`: the template with DiffToJson's object in it.
#include "absl/strings/str_replace.h"
#include "tools/report/diff_output.h"

namespace gpumem::report {

std::string RenderDiffHtml(const Diff& diff, std::size_t top) {
  // Inside <script>, "</" could end the element early; JSON allows "<\/" instead.
  const std::string text = absl::StrReplaceAll(DiffToJson(diff, top).dump(), {{"</", "<\\/"}});
  return absl::StrReplaceAll(kDiffHtmlTemplate, {{"/*GPUMEM_DATA*/", text}});
}

}  // namespace gpumem::report
