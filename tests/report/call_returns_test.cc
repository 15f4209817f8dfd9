// Whether a site's call returned while its blocks stayed: the paths of user frames
// (outermost first) of the stacks that allocated after them decide.
#include "tools/report/call_returns.h"

#include "gtest/gtest.h"

namespace gpumem::report {
namespace {

// Frames by (id, function id): the functions of a script, each line a frame.
constexpr UserFrame kTop{1, 100};        // <module>:90  main()
constexpr UserFrame kLoopLine{2, 101};   // main:60      out = train_step(batch())
constexpr UserFrame kLoopOther{3, 101};  // main:61      metric(out)
constexpr UserFrame kStepOut{4, 102};    // train_step:42  out = net(x)
constexpr UserFrame kStepLoss{5, 102};   // train_step:43  loss = ...
constexpr UserFrame kBatch{6, 103};      // batch:37
constexpr UserFrame kThread{7, 104};     // worker:10, a thread's own entry

TEST(CallReturns, AnotherCallFromTheSameLineAfterwardsShowsItReturned) {
  CallReturns r;
  r.Add({kTop, kLoopLine, kBatch}, 20);
  EXPECT_TRUE(r.Returned({kTop, kLoopLine, kStepOut}, 10));
  EXPECT_FALSE(r.Returned({kTop, kLoopLine, kStepOut}, 20));  // not after the kept block
}

TEST(CallReturns, AnotherLineOfTheCallerShowsItReturned) {
  CallReturns r;
  r.Add({kTop, kLoopOther}, 20);
  EXPECT_TRUE(r.Returned({kTop, kLoopLine, kStepOut}, 10));
}

TEST(CallReturns, TheCallersOwnAllocationAtThatLineShowsItReturned) {
  CallReturns r;
  r.Add({kTop, kLoopLine}, 20);  // e.g. torch.randn(...) among the call's arguments
  EXPECT_TRUE(r.Returned({kTop, kLoopLine, kStepOut}, 10));
}

TEST(CallReturns, TheSiteFunctionsOtherLinesAndDeeperCallsDoNot) {
  CallReturns r;
  r.Add({kTop, kLoopLine, kStepLoss}, 20);           // the same call, or the next one
  r.Add({kTop, kLoopLine, kStepOut, kBatch}, 20);    // called by the site's own line
  r.Add({kTop, kLoopLine, kStepOut}, 20);            // the site itself
  EXPECT_FALSE(r.Returned({kTop, kLoopLine, kStepOut}, 10));
}

TEST(CallReturns, AnotherThreadOrTheTopLevelAloneDoNot) {
  CallReturns r;
  r.Add({kThread, kBatch}, 20);
  EXPECT_FALSE(r.Returned({kTop, kLoopLine, kStepOut}, 10));
  r.Add({kTop, kLoopLine, kBatch}, 20);
  EXPECT_FALSE(r.Returned({kTop}, 10));  // a site at the top level has no caller
}

}  // namespace
}  // namespace gpumem::report
