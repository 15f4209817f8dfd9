// AutogradSites: which stack the live view files a backward allocation under.
#include "profiler/autograd_sites.h"

#include <memory>

#include "gtest/gtest.h"

namespace gpumem {
namespace {

RawRecord Linked(std::uint64_t seq, std::uint32_t node_frame, std::uint32_t stack) {
  RawRecord r;
  r.stack_id = stack;
  r.has_autograd = true;
  r.autograd_seq = seq;
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

TEST(AutogradSitesTest, UnknownOrOverwrittenNodesStayUnnamed) {
  auto sites = std::make_unique<AutogradSites>();
  EXPECT_EQ(sites->LiveStack(Linked(41, 3, 0)), 0u);  // never seen forward
  sites->LiveStack(Linked(43, 0, 7));
  sites->LiveStack(Linked(43 + (std::uint64_t{1} << 16), 0, 9));  // the ring came round
  EXPECT_EQ(sites->LiveStack(Linked(42, 3, 0)), 0u);
  RawRecord plain;
  plain.stack_id = 4;
  EXPECT_EQ(sites->LiveStack(plain), 4u);
}

}  // namespace
}  // namespace gpumem
