// Whether a leak site's function returns while the blocks it allocated stay live: then
// they are kept above it (a training step written as a helper that returns its output,
// a memoized encoder), and the site is named with its caller. The function that runs the
// loop never returns while it keeps them, so its site is named alone. Shared by the
// report and the in-process live view, each with its own frames and clock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace gpumem::report {

// A user frame (library frames left out): the frame (file, line, function) and its
// function (file, function), each as an id that the caller interned.
struct UserFrame {
  std::uint32_t frame;
  std::uint32_t function;
};

// The ids of UserFrame: a frame by its file, line and function, its function by its file
// and function name. One per CallReturns, shared by the report and the live view.
class UserFrameIds {
 public:
  UserFrame Of(absl::string_view file, int line, absl::string_view function);

 private:
  std::uint32_t Id(std::string key);
  absl::flat_hash_map<std::string, std::uint32_t> ids_;
};

class CallReturns {
 public:
  // A stack's user frames, outermost first, and when it last allocated (any clock that
  // grows: an event index, a step count).
  void Add(const std::vector<UserFrame>& path, std::uint64_t last_alloc);

  // Whether a stack allocated after `since` shows that the call down `path` to its
  // innermost frame (the site) has returned: it followed the same frames from the same
  // outermost one to a caller of that call, then went elsewhere (another call, another
  // line, or an allocation of that caller's own), but not into the site's function again
  // from the same line. A path of one frame (the script's top level) never returns.
  bool Returned(const std::vector<UserFrame>& path, std::uint64_t since) const;

 private:
  struct Node {
    std::uint32_t function = 0;
    std::uint64_t latest = 0;        // the last allocation of any stack through here
    std::uint64_t latest_ending = 0;  // of the stacks whose innermost user frame this is
    bool any_ending = false;
    bool any = false;
    absl::flat_hash_map<std::uint32_t, std::uint32_t> children;  // frame -> node
  };
  // Whether a subtree of `parent` other than `taken` allocated after `since`; at the site's
  // depth, only one whose frame is of another function than `site_function`.
  bool ElsewhereAfter(const Node& parent, std::uint32_t taken, std::uint64_t since,
                      const std::uint32_t* site_function) const;

  std::vector<Node> nodes_{Node{}};  // nodes_[0]: the root, above the outermost frames
};

}  // namespace gpumem::report
