#include "tools/trace/backward_caller.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "tools/trace/frame_table.h"

namespace gpumem::trace {
namespace {

bool IsPythonFrame(const Frame& f) {
  return absl::EndsWith(f.filename, ".py") || absl::StartsWith(f.filename, "<");
}

// torch.autograd's backward() and grad(): where a pass starts from the script's thread.
bool StartsBackward(const Frame& f) {
  return absl::EndsWith(f.filename, "torch/autograd/__init__.py") &&
         (f.function == "backward" || f.function == "grad");
}

// What each stack tells of the thread that made it.
struct StackKind {
  bool python = false;       // has a Python frame: not autograd's thread
  bool script = false;       // runs through a module's top level: the script's own thread
  int backward_from = -1;    // where a backward pass starts in it, else -1
};

StackKind KindOf(const Trace& trace, std::uint32_t stack) {
  StackKind kind;
  const std::vector<std::uint32_t>& frames = trace.stacks[stack];
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const Frame& f = trace.frames[frames[i]];
    kind.python |= IsPythonFrame(f);
    kind.script |= f.function == "<module>";
    if (kind.backward_from < 0 && StartsBackward(f)) kind.backward_from = static_cast<int>(i);
  }
  return kind;
}

class Attributor {
 public:
  explicit Attributor(Trace* trace)
      : trace_(*trace), table_(trace), kinds_(trace->stacks.size()) {}

  std::size_t Run() {
    std::size_t given = 0;
    std::uint32_t caller = 0;  // the stack that started the running pass; 0: none runs
    for (Event& e : trace_.events) {
      if (e.action != Action::kAlloc && e.action != Action::kOom) continue;
      const StackKind& kind = Kind(e.stack_id);
      if (kind.backward_from >= 0) {
        caller = e.stack_id;
      } else if (kind.script) {
        caller = 0;  // the script's thread went on: the pass is over
      } else if (!kind.python && caller != 0) {
        e.stack_id = Joined(e.stack_id, caller);
        ++given;
      }
    }
    return given;
  }

 private:
  // `own`'s frames, the pass's frame, then the caller's from where it starts the pass.
  std::uint32_t Joined(std::uint32_t own, std::uint32_t caller) {
    auto [it, added] = joined_.try_emplace({own, caller}, 0);
    if (!added) return it->second;
    if (!pass_frame_) {  // interned only where a pass is found, so other traces keep theirs
      pass_frame_ = InternBackwardPassFrame(&table_);
    }
    std::vector<std::uint32_t> frames = trace_.stacks[own];
    frames.push_back(*pass_frame_);
    const std::vector<std::uint32_t>& from = trace_.stacks[caller];
    const int start = Kind(caller).backward_from;
    frames.insert(frames.end(), from.begin() + start, from.end());
    it->second = table_.InternStack(frames);
    return it->second;
  }

  // Each stack the events held before any was joined is looked at once.
  const StackKind& Kind(std::uint32_t stack) {
    static const StackKind kNone;
    if (stack >= kinds_.size()) return kNone;  // no such stack: nothing to tell
    std::optional<StackKind>& kind = kinds_[stack];
    if (!kind) kind = KindOf(trace_, stack);
    return *kind;
  }

  Trace& trace_;
  FrameTable table_;
  std::vector<std::optional<StackKind>> kinds_;
  std::optional<std::uint32_t> pass_frame_;
  absl::flat_hash_map<std::pair<std::uint32_t, std::uint32_t>, std::uint32_t> joined_;
};

}  // namespace

std::uint32_t InternBackwardPassFrame(FrameTable* table) {
  return table->Intern({std::string(kBackwardPassFile), 0, "autograd's thread"});
}

std::size_t AttributeToBackwardCaller(Trace* trace) { return Attributor(trace).Run(); }

}  // namespace gpumem::trace
