// The headroom gpumem keeps free for libraries that allocate outside it, and the idle
// memory it gives back after an OOM or when such a library's allocation failed.
#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
#include "allocator/sim_backend.h"
#include "tests/allocator/gpumem_checked_backend.h"
#include "tests/allocator/test_units.h"

namespace gpumem {
namespace {

using namespace test_units;

SimBackendOptions OneGiB() {
  SimBackendOptions o;
  o.capacity = 1024 * kMiB;
  return o;
}

// 256 MiB held idle on the default stream.
std::unique_ptr<DeviceAllocator> WithIdle(Backend& backend, std::uint64_t headroom) {
  CachingAllocatorOptions options;
  options.headroom_bytes = headroom;
  options.borrow = false;  // the other stream's request grows: growth is what is tested
  auto a = MakeCachingAllocator(backend, options);
  absl::StatusOr<DevicePtr> p = a->Allocate(256 * kMiB, kDefaultStream);
  EXPECT_TRUE(p.ok()) << p.status();
  a->Free(*p);
  return a;
}

TEST(HeadroomTest, GrowthGivesIdlePagesBackWhenFreeMemoryRunsShort) {
  SimBackend sim(OneGiB());
  testing::CheckedBackend backend(sim);
  auto a = WithIdle(backend, 128 * kMiB);
  sim.set_other_users_bytes(640 * kMiB);  // 128 MiB free: less than the reserve after growth
  absl::StatusOr<DevicePtr> p = a->Allocate(64 * kMiB, kS1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(a->stats().reserved_bytes, 64 * kMiB);  // only what is in use
  EXPECT_GE(sim.DeviceFreeBytes(), 128 * kMiB);
  EXPECT_EQ(a->stats().trim_count, 1u);
}

TEST(HeadroomTest, IdlePagesStayWhileTheDeviceHasRoom) {
  SimBackend sim(OneGiB());
  testing::CheckedBackend backend(sim);
  auto a = WithIdle(backend, 128 * kMiB);
  sim.set_other_users_bytes(256 * kMiB);
  ASSERT_TRUE(a->Allocate(64 * kMiB, kS1).ok());
  EXPECT_GE(a->stats().reserved_bytes, 256 * kMiB);
  EXPECT_EQ(a->stats().trim_count, 0u);
}

// A batch-size finder must settle on a batch that leaves the reserve: the request that
// needs it is an OOM that says why, and the idle memory goes back.
TEST(HeadroomTest, ARequestThatNeedsTheReserveIsRefused) {
  SimBackend sim(OneGiB());
  testing::CheckedBackend backend(sim);
  auto a = WithIdle(backend, 512 * kMiB);
  sim.set_other_users_bytes(600 * kMiB);
  absl::StatusOr<DevicePtr> p = a->Allocate(300 * kMiB, kS1);
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(p.status()));
  EXPECT_NE(p.status().message().find("GPUMEM_HEADROOM"), std::string::npos) << p.status();
  EXPECT_EQ(a->last_oom().headroom_bytes, 512 * kMiB);
  EXPECT_EQ(a->stats().reserved_bytes, 0u);
  EXPECT_GE(sim.DeviceFreeBytes(), 424 * kMiB);
}

TEST(HeadroomTest, ARequestThatLeavesTheReserveIsServed) {
  SimBackend sim(OneGiB());
  testing::CheckedBackend backend(sim);
  auto a = WithIdle(backend, 128 * kMiB);
  sim.set_other_users_bytes(600 * kMiB);
  absl::StatusOr<DevicePtr> p = a->Allocate(280 * kMiB, kS1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(a->stats().reserved_bytes, 280 * kMiB);
  EXPECT_GE(sim.DeviceFreeBytes(), 128 * kMiB);
}

TEST(HeadroomTest, AnOomForLackOfMemorySaysNothingOfTheReserve) {
  SimBackend sim(OneGiB());
  auto a = WithIdle(sim, 64 * kMiB);
  ASSERT_FALSE(a->Allocate(2048 * kMiB, kS1).ok());
  EXPECT_EQ(a->last_oom().headroom_bytes, 0u);
}

TEST(HeadroomTest, OffAsksTheDriverNothing) {
  SimBackend sim(OneGiB());
  testing::CheckedBackend backend(sim);
  auto a = WithIdle(backend, 0);
  sim.set_other_users_bytes(700 * kMiB);
  ASSERT_TRUE(a->Allocate(64 * kMiB, kS1).ok());
  EXPECT_EQ(backend.free_queries.load(), 0);
}

TEST(HeadroomTest, AskedOnlyWhenGrowthCreatesMemory) {
  SimBackend sim(OneGiB());
  testing::CheckedBackend backend(sim);
  auto a = WithIdle(backend, 64 * kMiB);
  const int after_start = backend.free_queries.load();
  for (int i = 0; i < 100; ++i) {
    absl::StatusOr<DevicePtr> p = a->Allocate(128 * kMiB, kDefaultStream);
    ASSERT_TRUE(p.ok());
    a->Free(*p);
  }
  EXPECT_EQ(backend.free_queries.load(), after_start);
}

TEST(HeadroomTest, AnOomGivesIdleMemoryBack) {
  SimBackend sim(OneGiB());
  auto a = WithIdle(sim, 0);
  absl::StatusOr<DevicePtr> live = a->Allocate(100 * kMiB, kS1);
  ASSERT_TRUE(live.ok());
  // A batch-size finder's request that cannot fit: it fails before trimming anything.
  EXPECT_FALSE(a->Allocate(2048 * kMiB, kDefaultStream).ok());
  EXPECT_EQ(a->last_oom().reserved_bytes, 256 * kMiB);  // the live block was stitched
  EXPECT_EQ(a->stats().reserved_bytes, 100 * kMiB);  // the live block's pages stay
  a->Free(*live);
}

// Another library's burst (an NCCL communicator's buffers) ate into the reserve: the idle
// memory goes back so that the rest of the burst finds room; with the reserve intact,
// nothing moves.
TEST(HeadroomTest, KeepHeadroomGivesIdleBackOnlyWhenTheReserveIsShort) {
  SimBackend sim(OneGiB());
  auto a = WithIdle(sim, 256 * kMiB);
  sim.set_other_users_bytes(512 * kMiB);  // 256 MiB free: the reserve holds
  a->KeepHeadroom();
  EXPECT_EQ(a->stats().reserved_bytes, 256 * kMiB);
  sim.set_other_users_bytes(600 * kMiB);  // 168 MiB free
  a->KeepHeadroom();
  EXPECT_EQ(a->stats().reserved_bytes, 0u);
}

// A library sized its workspace to nearly all the device had free: the idle memory went
// back so that it found room, and the steps that need that memory again take it back
// from the driver, reserve or not, as PyTorch's allocator would never have let it go.
// Growth beyond what went back still keeps the reserve.
TEST(HeadroomTest, MemoryGivenBackForOtherLibrariesComesBackForTheSteps) {
  SimBackend sim(OneGiB());
  auto a = WithIdle(sim, 512 * kMiB);
  sim.set_other_users_bytes(600 * kMiB);  // 168 MiB free: under the reserve
  a->KeepHeadroom();
  ASSERT_EQ(a->stats().reserved_bytes, 0u);
  absl::StatusOr<DevicePtr> p = a->Allocate(256 * kMiB, kS1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(a->Allocate(64 * kMiB, kS1).ok());  // more than went back: the reserve holds
  EXPECT_EQ(a->last_oom().headroom_bytes, 512 * kMiB);
  a->Free(*p);
}

TEST(HeadroomTest, MemoryReleasedForAFailedLibraryCallComesBackToo) {
  SimBackend sim(OneGiB());
  auto a = WithIdle(sim, 512 * kMiB);
  a->ReleaseIdle();  // a library's cuMemAlloc failed; it retries and takes 600 MiB
  sim.set_other_users_bytes(600 * kMiB);
  EXPECT_TRUE(a->Allocate(256 * kMiB, kS1).ok());
}

// What torch.cuda.empty_cache() gives back went to no one: growth keeps the reserve.
TEST(HeadroomTest, EmptyCacheLeavesTheReserveAsItWas) {
  SimBackend sim(OneGiB());
  auto a = WithIdle(sim, 512 * kMiB);
  a->EmptyCache();
  sim.set_other_users_bytes(600 * kMiB);
  EXPECT_FALSE(a->Allocate(256 * kMiB, kS1).ok());
}

TEST(HeadroomTest, ReleaseIdleGivesIdleMemoryBack) {
  SimBackend sim(OneGiB());
  auto a = WithIdle(sim, 0);
  a->ReleaseIdle();
  EXPECT_EQ(a->stats().reserved_bytes, 0u);
}

// A tracer's callback on gpumem's own failed cuMemCreate asks for a release while the
// allocator holds its lock: it must return at once, not deadlock.
TEST(HeadroomTest, ReleaseIdleFromInsideGrowthDoesNothing) {
  SimBackend sim(OneGiB());
  testing::CheckedBackend backend(sim);
  auto a = WithIdle(backend, 0);
  int calls = 0;
  backend.on_create_failure = [&] {
    ++calls;
    a->ReleaseIdle();
  };
  sim.set_other_users_bytes(900 * kMiB);
  EXPECT_TRUE(a->Allocate(64 * kMiB, kS1).ok());  // stitched from the idle pages
  EXPECT_FALSE(a->Allocate(512 * kMiB, kS1).ok());
  EXPECT_GT(calls, 0);
}

}  // namespace
}  // namespace gpumem
