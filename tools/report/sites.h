// Sites: an allocation's site is the innermost frame of its stack that lies in user code
// (not in torch, other installed packages or the Python standard library). Allocations
// are grouped by site for leak detection and display; the full stack stays available.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

#include "tools/report/library_keepers.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

// True for frames of libraries the user does not edit: a leak is fixed where user code
// called into them, so that is where we point.
bool IsLibraryFrame(const trace::Frame& frame);

// A site's file as displayed: an installed package's path from the package on (as
// PyTorch's memory_viz shows it: "torch/nn/modules/linear.py"), an absolute path
// relative to `common_dir` (the folder all the trace's sites share, ending in '/') when
// it lies inside it; anything else unchanged. Stacks keep the full paths.
std::string DisplayPath(absl::string_view file, absl::string_view common_dir);

// The deepest folder (ending in '/', never just "/") holding every absolute path among
// `files` that is not inside an installed package; empty if there is none.
std::string CommonDir(const std::vector<absl::string_view>& files);

// Maps every stack of a trace to a site id. Site 0 is "no Python frames" (allocations
// made from native threads), which still get tracked. Backward allocations of a trace
// with autograd links carry their forward op's stack (tools/trace/autograd_links.h), so
// they land on the forward site.
class SiteTable {
 public:
  explicit SiteTable(const trace::Trace& trace);

  std::uint32_t site_of_stack(std::uint32_t stack_id) const { return site_of_stack_[stack_id]; }
  std::size_t size() const { return sites_.size(); }
  // "file:line function" with the file as DisplayPath shows it, or "<no Python frames>"
  // for site 0.
  const std::string& name(std::uint32_t site) const { return sites_[site].name; }
  // Any frame named as sites are: "file:line function", the file as DisplayPath shows it.
  std::string Label(const trace::Frame& frame) const;
  // The folder the sites' absolute paths are shown relative to ("" if none).
  const std::string& common_dir() const { return common_dir_; }
  // The frame id the site names (meaningless for site 0).
  std::uint32_t frame(std::uint32_t site) const { return sites_[site].frame; }
  // One representative full stack of the site (the first one seen).
  std::uint32_t example_stack(std::uint32_t site) const { return sites_[site].example_stack; }

 private:
  struct Site {
    std::string name;
    std::uint32_t frame = 0;
    std::uint32_t example_stack = 0;
  };
  std::vector<std::uint32_t> site_of_stack_;
  std::vector<Site> sites_;
  std::string common_dir_;
};

std::string FrameName(const trace::Frame& frame);

// The library whose code allocated a stack's block to keep it (library_keepers.h).
Keeper KeeperOfStack(const trace::Trace& trace, std::uint32_t stack);

// The innermost user frame of `kept`, outside its site's frame, that `other` (a stack of
// the same site) lacks: the call through which a site's kept blocks came where its freed
// ones came another way (a helper that allocates for the training pass and for a list the
// loop keeps). nullopt when every such frame is in `other` too. With `other` 0 (no
// stack), the call of the site's function, unless a module's top level
// (CallerTellsNothing).
std::optional<std::uint32_t> CallApart(const trace::Trace& trace, std::uint32_t kept,
                                       std::uint32_t other);

}  // namespace gpumem::report
