#include "tools/trace/backward_caller.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tools/trace/frame_table.h"

namespace gpumem::trace {
namespace {

class BackwardCallerTest : public ::testing::Test {
 protected:
  // A stack of the frames given, innermost first.
  std::uint32_t Stack(const std::vector<Frame>& frames) {
    std::vector<std::uint32_t> ids;
    for (const Frame& f : frames) ids.push_back(table_.Intern(f));
    return table_.InternStack(ids);
  }
  void Alloc(std::uint32_t stack) {
    Event e;
    e.action = Action::kAlloc;
    e.stack_id = stack;
    e.addr = 0x1000 * (trace_.events.size() + 1);
    e.size = 512;
    trace_.events.push_back(e);
  }
  // The innermost frames of event `i`'s stack, as "file:line".
  std::vector<std::string> Frames(std::size_t i) {
    std::vector<std::string> out;
    for (std::uint32_t f : trace_.stacks[trace_.events[i].stack_id]) {
      out.push_back(trace_.frames[f].filename + ":" + std::to_string(trace_.frames[f].line));
    }
    return out;
  }

  Trace trace_;
  FrameTable table_{&trace_};
  const Frame module_{"train.py", 30, "<module>"};
  const Frame autograd_{"site-packages/torch/autograd/__init__.py", 374, "backward"};
};

// loss.backward() at train.py:12 makes the loss's gradient, then autograd's thread
// allocates with no Python frame (or C++ ones only), a hook's Python code among them,
// until the script's thread allocates at train.py:10 again.
TEST_F(BackwardCallerTest, AutogradsAllocationsTakeTheStackOfTheCallThatStartedThePass) {
  const std::uint32_t forward = Stack({{"train.py", 10, "step"}, module_});
  const std::uint32_t seed = Stack({{"site-packages/torch/autograd/__init__.py", 231, "_make_grads"},
                                    autograd_, {"train.py", 12, "step"}, module_});
  const std::uint32_t cpp = Stack({{"??", 0, "at::detail::empty_cuda"}, {"engine.cpp", 0, "thread_main"}});
  const std::uint32_t hook = Stack({{"train.py", 5, "keep_grad"}});
  Alloc(forward);  // 0: before any pass, kept as it is
  Alloc(0);        // 1: no frames, no pass yet
  Alloc(seed);     // 2
  Alloc(0);        // 3
  Alloc(cpp);      // 4
  Alloc(hook);     // 5: a hook on autograd's thread: the pass goes on
  Alloc(0);        // 6
  Alloc(forward);  // 7: the script's thread again
  Alloc(0);        // 8
  EXPECT_EQ(AttributeToBackwardCaller(&trace_), 3u);
  const std::vector<std::string> caller = {"<backward pass>:0",
                                           "site-packages/torch/autograd/__init__.py:374",
                                           "train.py:12", "train.py:30"};
  EXPECT_EQ(Frames(3), caller);
  std::vector<std::string> with_cpp = {"??:0", "engine.cpp:0"};
  with_cpp.insert(with_cpp.end(), caller.begin(), caller.end());
  EXPECT_EQ(Frames(4), with_cpp);
  EXPECT_EQ(Frames(6), caller);
  EXPECT_EQ(trace_.events[1].stack_id, 0u);
  EXPECT_EQ(trace_.events[5].stack_id, hook);
  EXPECT_EQ(trace_.events[8].stack_id, 0u);
}

// A trace with no backward pass gets no new frame.
TEST_F(BackwardCallerTest, NoPassNoChange) {
  Alloc(Stack({{"train.py", 10, "step"}, module_}));
  Alloc(0);
  const std::size_t frames = trace_.frames.size();
  EXPECT_EQ(AttributeToBackwardCaller(&trace_), 0u);
  EXPECT_EQ(trace_.frames.size(), frames);
}

}  // namespace
}  // namespace gpumem::trace
