// AutogradSites: which stack the live view files a backward allocation under.
#include "profiler/autograd_sites.h"

#include <memory>

#include "gtest/gtest.h"

namespace gpumem {
namespace {

RawRecord Linked(std::uint64_t seq, std::uint32_t node_frame, std::uint32_t stack,
                 std::uint32_t thread = 1) {
  RawRecord r;
  r.stack_id = stack;
  r.has_autograd = true;
  r.autograd_seq = seq;
  r.autograd_thread = thread;
  r.autograd_node_frame = node_frame;
  return r;
}

TEST(AutogradSitesTest, BackwardTakesItsForwardOpsFirstStack) {
  auto sites = std::make_unique<AutogradSites>();
  EXPECT_EQ(sites->LiveStack(Linked(11, 0, 7)), 7u);  // node 10's output
  EXPECT_EQ(sites->LiveStack(Linked(11, 0, 8)), 8u);  // a later allocation, same number
  EXPECT_EQ(sites->LiveStack(Linked(10, 3, 0)), 7u);  // node 10's backward
  EXPECT_EQ(sites->LiveStack(Linked(10, 3, 5)), 5u);  // one with a stack of its own keeps it
}

TEST(AutogradSitesTest, UnknownNodesOfAThreadNeverSeenStayUnnamed) {
  auto sites = std::make_unique<AutogradSites>();
  EXPECT_EQ(sites->LiveStack(Linked(41, 3, 0)), 0u);  // never seen forward
  RawRecord plain;
  plain.stack_id = 4;
  EXPECT_EQ(sites->LiveStack(plain), 4u);
}

// A node past the ring, or one no forward op made (AccumulateGrad, making a parameter's
// gradient, numbered 2^64-1), takes the stack of its forward thread's last allocation:
// loss.backward()'s gradient seed. Another thread's allocations do not change it.
TEST(AutogradSitesTest, NodesWithoutAForwardOpTakeTheBackwardCallersStack) {
  auto sites = std::make_unique<AutogradSites>();
  sites->LiveStack(Linked(43, 0, 7));
  sites->LiveStack(Linked(43 + (std::uint64_t{1} << 16), 0, 9));  // the ring came round
  sites->LiveStack(Linked(50, 0, 12, /*thread=*/2));  // another thread's
  EXPECT_EQ(sites->LiveStack(Linked(42, 3, 0)), 9u);
  EXPECT_EQ(sites->LiveStack(Linked(format::kNoAutogradSequence, 3, 0)), 9u);
  EXPECT_EQ(sites->LiveStack(Linked(format::kNoAutogradSequence, 3, 0, /*thread=*/2)), 12u);
  // Not the first forward allocation's, numbered 0 (2^64-1 + 1).
  sites->LiveStack(Linked(0, 0, 21, /*thread=*/3));
  sites->LiveStack(Linked(5, 0, 22, /*thread=*/3));
  EXPECT_EQ(sites->LiveStack(Linked(format::kNoAutogradSequence, 3, 0, /*thread=*/3)), 22u);
}

}  // namespace
}  // namespace gpumem
