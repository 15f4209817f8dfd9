// Replay on small hand-made traces: what it counts, what it rejects, and how it reports
// an OOM.
#include "tools/replay/replayer.h"

#include <initializer_list>

#include "gtest/gtest.h"

namespace gpumem::replay {
namespace {

using trace::Action;
constexpr std::uint64_t kMiB = 1 << 20;

trace::Trace Make(std::initializer_list<trace::Event> events) {
  trace::Trace t;
  t.source = "hand.tsv";
  t.events = events;
  return t;
}

trace::Event E(Action action, std::uint64_t addr, std::uint64_t size = 0) {
  trace::Event e;
  e.action = action;
  e.addr = addr;
  e.size = size;
  return e;
}

TEST(ReplayTest, PeakAllocatedIsThePeakOfLiveTraceSizes) {
  const trace::Trace t = Make({
      E(Action::kSegmentAlloc, 100, 40 * kMiB),  // what PyTorch did: ignored
      E(Action::kAlloc, 100, 30 * kMiB),
      E(Action::kAlloc, 200, 12 * kMiB),
      E(Action::kFreeRequested, 100, 30 * kMiB),
      E(Action::kFreeCompleted, 100, 30 * kMiB),
      E(Action::kAlloc, 300, 1000),
      E(Action::kFreeRequested, 300, 1000),
      E(Action::kFreeCompleted, 300, 1000),
  });
  absl::StatusOr<ReplayResult> r = Replay(t, "pytorch");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->events, t.events.size());
  EXPECT_EQ(r->peak_allocated, 42 * kMiB);
  // PyTorch: a 30 MiB segment (rounded to 2 MiB), a 12 MiB one, and a 2 MiB small one.
  EXPECT_EQ(r->peak_reserved, 44 * kMiB);
  EXPECT_DOUBLE_EQ(r->ratio, 44.0 / 42.0);
  EXPECT_FALSE(r->oom.has_value());
  EXPECT_EQ(r->policy, "pytorch");
  EXPECT_EQ(PeakAllocated(t), r->peak_allocated);
}

// The memory of a block is reusable at free_completed, not free_requested: a request for
// the same size between the two must not reuse it.
TEST(ReplayTest, FreeTakesEffectAtFreeCompleted) {
  const trace::Trace t = Make({
      E(Action::kAlloc, 100, 30 * kMiB),
      E(Action::kFreeRequested, 100, 30 * kMiB),
      E(Action::kAlloc, 200, 30 * kMiB),  // still in use by another stream
      E(Action::kFreeCompleted, 100, 30 * kMiB),
  });
  absl::StatusOr<ReplayResult> r = Replay(t, "pytorch");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->peak_allocated, 60 * kMiB);
  EXPECT_EQ(r->peak_reserved, 60 * kMiB);
}

// Traces without free_completed (older recorders) free at free_requested.
TEST(ReplayTest, FreeRequestedFreesWhenNoFreeCompletedFollows) {
  const trace::Trace t = Make({
      E(Action::kAlloc, 100, 30 * kMiB),
      E(Action::kFreeRequested, 100, 30 * kMiB),
      E(Action::kAlloc, 200, 30 * kMiB),
      E(Action::kFreeRequested, 200, 30 * kMiB),
      E(Action::kAlloc, 100, 30 * kMiB),  // the address comes back: the free happened
  });
  absl::StatusOr<ReplayResult> r = Replay(t, "pytorch");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->peak_allocated, 30 * kMiB);
  EXPECT_EQ(r->peak_reserved, 30 * kMiB);
}

TEST(ReplayTest, OomUnderACapStopsAtTheFailingEvent) {
  const trace::Trace t = Make({
      E(Action::kAlloc, 100, 30 * kMiB),
      E(Action::kAlloc, 200, 30 * kMiB),
      E(Action::kFreeCompleted, 100, 30 * kMiB),
  });
  ReplayOptions options;
  options.capacity = 50 * kMiB;
  for (const char* policy : {"pytorch", "pytorch-expandable"}) {
    absl::StatusOr<ReplayResult> r = Replay(t, policy, options);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(r->oom.has_value()) << policy;
    EXPECT_EQ(r->oom->event_index, 1u) << policy;
    EXPECT_EQ(r->oom->requested_bytes, 30 * kMiB);
    EXPECT_EQ(r->oom->allocated_bytes, 30 * kMiB);
    EXPECT_EQ(r->events, 1u);
    EXPECT_EQ(r->peak_allocated, 30 * kMiB);
  }
  // The expandable policy holds whole 20 MiB pages: 40 MiB for the first block, and a
  // third page would pass the cap.
  absl::StatusOr<ReplayResult> r = Replay(t, "pytorch-expandable", options);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->oom->reserved_bytes, 40 * kMiB);
}

// Device calls are counted per step: the first step maps the pages, the next ones reuse
// the cached block and ask nothing of the device.
TEST(ReplayTest, CountsDeviceCallsPerStep) {
  const trace::Trace t = Make({
      E(Action::kAlloc, 100, 30 * kMiB),
      E(Action::kFreeCompleted, 100, 30 * kMiB),
      E(Action::kAlloc, 200, 30 * kMiB),
      E(Action::kFreeCompleted, 200, 30 * kMiB),
      E(Action::kAlloc, 300, 30 * kMiB),
      E(Action::kFreeCompleted, 300, 30 * kMiB),
  });
  ReplayOptions options;
  options.step_ends = {2, 4};
  absl::StatusOr<ReplayResult> r = Replay(t, "gpumem", options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->steps.size(), 3u);
  EXPECT_EQ(r->steps[0].maps, 15u);  // 30 MiB of 2 MiB pages
  EXPECT_EQ(r->steps[0].physical_creates, 15u);
  EXPECT_EQ(r->steps[1], DeviceActivity{});
  EXPECT_EQ(r->steps[2], DeviceActivity{});
  EXPECT_EQ(r->warmup_steps, 1u);  // the first half
  EXPECT_EQ(r->total, r->steps[0]);
  EXPECT_EQ(r->steady, DeviceActivity{});

  // PyTorch's emulation takes a segment instead, once.
  r = Replay(t, "pytorch", options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->steps[0].segment_allocs, 1u);
  EXPECT_EQ(r->total.segment_allocs, 1u);
  EXPECT_EQ(r->total.maps, 0u);
}

TEST(ReplayTest, WithoutStepsTheReplayIsOneStep) {
  const trace::Trace t = Make({E(Action::kAlloc, 100, 30 * kMiB)});
  absl::StatusOr<ReplayResult> r = Replay(t, "gpumem");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->steps.size(), 1u);
  EXPECT_EQ(r->steps[0].maps, 15u);
}

TEST(ReplayTest, EqualStepEndsSliceTheEvents) {
  EXPECT_EQ(EqualStepEnds(10, 3), (std::vector<std::size_t>{3, 6}));
  EXPECT_EQ(EqualStepEnds(10, 1), std::vector<std::size_t>{});
}

// What fails is one line naming the file and the event.
void ExpectError(const trace::Trace& t, const std::string& fragment) {
  absl::StatusOr<ReplayResult> r = Replay(t, "pytorch");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(r.status().message());
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.rfind("hand.tsv", 0), 0u) << message;
  EXPECT_NE(message.find(fragment), std::string::npos) << message;
}

// Allocs and frees that do not pair up are treated as `gpumem report` treats them
// (trace/unpaired_events.h), and counted.
TEST(ReplayTest, IgnoresAFreeOfAnAddressThatIsNotLive) {
  absl::StatusOr<ReplayResult> r =
      Replay(Make({E(Action::kAlloc, 100, 4096), E(Action::kFreeCompleted, 300, 4096)}), "pytorch");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->unmatched_frees, 1u);
  EXPECT_EQ(r->events, 2u);
  r = Replay(Make({E(Action::kAlloc, 100, 4096), E(Action::kFreeCompleted, 100),
                   E(Action::kFreeCompleted, 100)}),
             "pytorch");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->unmatched_frees, 1u);
}

TEST(ReplayTest, AnAllocAtALiveAddressFreesTheEarlierBlock) {
  absl::StatusOr<ReplayResult> r = Replay(
      Make({E(Action::kAlloc, 100, 4096), E(Action::kAlloc, 100, 8192), E(Action::kFreeCompleted, 100)}),
      "pytorch");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reused_addresses, 1u);
  EXPECT_EQ(r->unmatched_frees, 0u);
  EXPECT_EQ(r->peak_allocated, 8192u);  // not 4096 + 8192: the first block was freed
}

TEST(ReplayTest, RejectsAnEmptyTrace) { ExpectError(Make({}), "no events"); }

TEST(ReplayTest, RejectsAnUnknownPolicy) {
  absl::StatusOr<ReplayResult> r = Replay(Make({E(Action::kAlloc, 1, 1)}), "tcmalloc");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpumem::replay
