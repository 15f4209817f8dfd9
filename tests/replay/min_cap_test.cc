// FindMinCap on hand-made traces: the boundary it reports holds on both sides, and a
// trace that fragments PyTorch's segments needs a larger device under it than under gpumem.
#include "tools/replay/min_cap.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace gpumem::replay {
namespace {

using trace::Action;
constexpr std::uint64_t kMiB = 1 << 20;

trace::Event E(Action action, std::uint64_t addr, std::uint64_t size) {
  trace::Event e;
  e.action = action;
  e.addr = addr;
  e.size = size;
  return e;
}

void Free(std::vector<trace::Event>* events, std::uint64_t addr, std::uint64_t size) {
  events->push_back(E(Action::kFreeRequested, addr, size));
  events->push_back(E(Action::kFreeCompleted, addr, size));
}

// Eight 6 MiB blocks, every other one freed, then 24 MiB: the free memory is there in
// pieces. gpumem stitches them; PyTorch's segments cannot move, so it needs more.
trace::Trace Fragmenting() {
  trace::Trace t;
  t.source = "fragmenting.tsv";
  for (std::uint64_t i = 0; i < 8; ++i) t.events.push_back(E(Action::kAlloc, 100 + i, 6 * kMiB));
  for (std::uint64_t i = 0; i < 8; i += 2) Free(&t.events, 100 + i, 6 * kMiB);
  t.events.push_back(E(Action::kAlloc, 200, 24 * kMiB));
  return t;
}

bool Completes(const trace::Trace& t, const char* policy, std::uint64_t cap) {
  ReplayOptions options;
  options.capacity = cap;
  absl::StatusOr<ReplayResult> r = Replay(t, policy, options);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() && !r->oom.has_value();
}

TEST(MinCapTest, TheBoundaryHoldsOnBothSides) {
  const trace::Trace t = Fragmenting();
  for (const char* policy : {"gpumem", "pytorch", "pytorch-expandable"}) {
    SCOPED_TRACE(policy);
    absl::StatusOr<MinCapResult> r = FindMinCap(t, policy, {}, kMiB);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->peak_allocated, 48 * kMiB);
    EXPECT_GE(r->min_cap, r->peak_allocated);
    EXPECT_LE(r->min_cap, std::max(r->uncapped_reserved, r->peak_allocated));
    EXPECT_TRUE(Completes(t, policy, r->min_cap));
    if (r->failed_cap > 0) {
      EXPECT_FALSE(Completes(t, policy, r->failed_cap));
      EXPECT_LE(r->min_cap - r->failed_cap, kMiB);
    }
    EXPECT_GE(r->replays, 2u);
  }
}

TEST(MinCapTest, StitchingNeedsTheLeastMemory) {
  const trace::Trace t = Fragmenting();
  absl::StatusOr<MinCapResult> gpumem = FindMinCap(t, "gpumem", {}, kMiB);
  absl::StatusOr<MinCapResult> pytorch = FindMinCap(t, "pytorch", {}, kMiB);
  ASSERT_TRUE(gpumem.ok() && pytorch.ok());
  EXPECT_EQ(gpumem->min_cap, 48 * kMiB);  // exactly what is live: 2 MiB pages, all used
  EXPECT_GT(pytorch->min_cap, gpumem->min_cap);
}

TEST(MinCapTest, ErrorsInTheTraceAreReported) {
  trace::Trace t;
  t.source = "bad.tsv";
  EXPECT_FALSE(FindMinCap(t, "gpumem", {}).ok());  // no events
  EXPECT_FALSE(FindMinCap(Fragmenting(), "no-such-policy", {}).ok());
}

}  // namespace
}  // namespace gpumem::replay
