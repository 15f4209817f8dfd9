// The C ABI on the simulated backend (GPUMEM_BACKEND=sim): what PyTorch and the Python
// package see, checked without a GPU.
#include <cstdlib>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "allocator/sim_backend.h"
#include "gtest/gtest.h"
#include "hooks/device_registry.h"
#include "hooks/gpumem.h"

namespace gpumem::hooks {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

class CApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"GPUMEM_CAPACITY", "GPUMEM_MEMORY_FRACTION", "GPUMEM_TRACE",
                          "GPUMEM_LOG_OOM", "GPUMEM_VERBOSE", "GPUMEM_HEADROOM",
                          "GPUMEM_BORROW"}) {
      unsetenv(v);
    }
    setenv("GPUMEM_BACKEND", "sim", 1);
    // The figures below are in 2 MiB pages; the default page has a test of its own.
    setenv("GPUMEM_PAGE_SIZE", "2M", 1);
    ResetRegistryForTesting();
  }
  void TearDown() override { ResetRegistryForTesting(); }

  // Devices capped at `cap` whose out of memory prints no report.
  static void StartCappedQuietly(const char* cap) {
    setenv("GPUMEM_CAPACITY", cap, 1);
    setenv("GPUMEM_LOG_OOM", "0", 1);
    ResetRegistryForTesting();
  }
  SimBackend& Sim(int device = 0) {
    return static_cast<SimBackend&>(*StartedDevice(device)->backend.backend);
  }
  static std::string Text(size_t (*fn)(char*, size_t)) {
    std::string s(fn(nullptr, 0), '\0');
    fn(s.data(), s.size());
    s.resize(s.size() - 1);
    return s;
  }
  static std::string DeviceText(size_t (*fn)(int, char*, size_t), int device) {
    std::string s(fn(device, nullptr, 0), '\0');
    fn(device, s.data(), s.size());
    s.resize(s.size() - 1);
    return s;
  }
};

TEST_F(CApiTest, AllocatesUsableDistinctBlocksAndCountsThem) {
  std::vector<void*> blocks;
  std::set<void*> distinct;
  const ssize_t sizes[] = {1, 512, 4096, 1 << 20, 3 << 20, 64 << 20};
  for (ssize_t size : sizes) {
    void* p = gpumem_alloc(size, 0, nullptr);
    ASSERT_NE(p, nullptr) << size;
    EXPECT_TRUE(Sim().IsAccessible(reinterpret_cast<DevicePtr>(p), size)) << size;
    blocks.push_back(p);
    distinct.insert(p);
  }
  EXPECT_EQ(distinct.size(), blocks.size());
  EXPECT_STREQ(gpumem_backend_name(0), "sim");

  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  std::uint64_t total = 0;
  for (ssize_t s : sizes) total += s;
  EXPECT_GE(st.allocated_bytes, total);
  EXPECT_EQ(st.active_blocks, blocks.size());
  EXPECT_GE(st.reserved_bytes, st.allocated_bytes);
  EXPECT_EQ(st.alloc_count, blocks.size());

  for (size_t i = 0; i < blocks.size(); ++i) gpumem_free(blocks[i], sizes[i], 0, nullptr);
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.active_blocks, 0u);
  EXPECT_EQ(st.free_count, blocks.size());
}

TEST_F(CApiTest, EmptyCacheReturnsEveryByte) {
  void* a = gpumem_alloc(10 * kMiB, 0, nullptr);
  void* b = gpumem_alloc(100, 0, nullptr);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  gpumem_free(a, 10 * kMiB, 0, nullptr);
  gpumem_free(b, 100, 0, nullptr);
  gpumem_empty_cache(-1);
  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_EQ(st.reserved_bytes, 0u);
  EXPECT_EQ(Sim().counters().physical_bytes, 0u);
  EXPECT_GE(st.peak_reserved_bytes, 10 * kMiB);
}

// A library's cudaMalloc failed (the CUPTI tracer saw it): the idle memory goes back so
// that its retry finds room, and live blocks stay.
TEST_F(CApiTest, ReleaseIdleAfterAnOutsideFailureLetsTheRetrySucceed) {
  setenv("GPUMEM_CAPACITY", "256M", 1);
  ResetRegistryForTesting();
  void* idle = gpumem_alloc(160 * kMiB, 0, nullptr);
  void* live = gpumem_alloc(32 * kMiB, 0, nullptr);
  ASSERT_NE(idle, nullptr);
  ASSERT_NE(live, nullptr);
  gpumem_free(idle, 160 * kMiB, 0, nullptr);
  Sim().set_other_users_bytes(48 * kMiB);  // cuBLAS's handle so far
  ASSERT_LT(Sim().DeviceFreeBytes(), 64 * kMiB);  // its 64 MiB workspace fails
  gpumem_release_idle(0);
  EXPECT_GE(Sim().DeviceFreeBytes(), 64 * kMiB);  // the retry fits
  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_EQ(st.allocated_bytes, 32 * kMiB);
  gpumem_free(live, 32 * kMiB, 0, nullptr);
  gpumem_release_idle(5);  // a device never started: nothing
}

TEST_F(CApiTest, HeadroomIsKeptWhenSet) {
  setenv("GPUMEM_CAPACITY", "256M", 1);
  setenv("GPUMEM_HEADROOM", "64M", 1);
  setenv("GPUMEM_BORROW", "0", 1);  // the other stream's request grows: growth is tested
  ResetRegistryForTesting();
  void* idle = gpumem_alloc(128 * kMiB, 0, nullptr);
  ASSERT_NE(idle, nullptr);
  gpumem_free(idle, 128 * kMiB, 0, nullptr);
  Sim().set_other_users_bytes(96 * kMiB);
  void* other_stream = gpumem_alloc(16 * kMiB, 0, reinterpret_cast<CUstream_st*>(1));
  ASSERT_NE(other_stream, nullptr);
  EXPECT_GE(Sim().DeviceFreeBytes(), 64 * kMiB);
  gpumem_free(other_stream, 16 * kMiB, 0, reinterpret_cast<CUstream_st*>(1));
}

TEST_F(CApiTest, OutOfMemoryReturnsNullWithAReport) {
  StartCappedQuietly("64M");
  void* small = gpumem_alloc(8 * kMiB, 0, nullptr);
  ASSERT_NE(small, nullptr);
  EXPECT_EQ(gpumem_alloc(128 * kMiB, 0, nullptr), nullptr);
  std::string oom = DeviceText(gpumem_last_oom, 0);
  EXPECT_NE(oom.find("out of memory"), std::string::npos) << oom;
  EXPECT_NE(oom.find("128.00 MiB"), std::string::npos) << oom;
  std::string last = Text(gpumem_last_error);
  EXPECT_NE(last.find("device 0"), std::string::npos) << last;
  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_EQ(st.oom_count, 1u);
  EXPECT_EQ(st.capacity_bytes, 64 * kMiB);
  // Still usable after the failure.
  void* again = gpumem_alloc(8 * kMiB, 0, nullptr);
  EXPECT_NE(again, nullptr);
  gpumem_free(again, 8 * kMiB, 0, nullptr);
  gpumem_free(small, 8 * kMiB, 0, nullptr);
}

// What PyTorch's pluggable allocator gets when wired from Python: a throw, never a NULL
// it would use unchecked; an out of memory in PyTorch's own first words.
TEST_F(CApiTest, ThrowingAllocRaisesWhereTheOtherReturnsNull) {
  StartCappedQuietly("64M");
  void* small = gpumem_alloc_or_throw(8 * kMiB, 0, nullptr);
  ASSERT_NE(small, nullptr);
  try {
    gpumem_alloc_or_throw(128 * kMiB, 0, nullptr);
    ADD_FAILURE() << "no throw past the cap";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("CUDA out of memory. Tried to allocate 134217728 bytes on device 0.", 0),
              0u) << what;
    EXPECT_NE(what.find("128.00 MiB"), std::string::npos) << what;  // gpumem's report
  }
  EXPECT_THROW(gpumem_alloc_or_throw(-1, 0, nullptr), std::runtime_error);
  try {
    gpumem_alloc_or_throw(8 * kMiB, 300, nullptr);  // no such device: not an out of memory
    ADD_FAILURE() << "no throw for a device that cannot start";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()).find("CUDA out of memory"), std::string::npos) << e.what();
  }
  void* again = gpumem_alloc_or_throw(8 * kMiB, 0, nullptr);  // still usable
  EXPECT_NE(again, nullptr);
  gpumem_free(again, 8 * kMiB, 0, nullptr);
  gpumem_free(small, 8 * kMiB, 0, nullptr);
}

TEST_F(CApiTest, CapacityCanShrinkAtRunTime) {
  setenv("GPUMEM_LOG_OOM", "0", 1);
  ResetRegistryForTesting();
  void* p = gpumem_alloc(64 * kMiB, 0, nullptr);
  ASSERT_NE(p, nullptr);
  gpumem_free(p, 64 * kMiB, 0, nullptr);
  ASSERT_EQ(gpumem_set_capacity(32 * kMiB, 0), 0);
  gpumem_stats_t held;
  ASSERT_EQ(gpumem_stats(0, &held), 0);
  EXPECT_LE(held.reserved_bytes, 32 * kMiB);  // a lower cap releases the cache
  EXPECT_EQ(gpumem_alloc(64 * kMiB, 0, nullptr), nullptr);
  // A fraction of the simulated 80 GiB device.
  ASSERT_EQ(gpumem_set_memory_fraction(0.5, 0), 0);
  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_EQ(st.capacity_bytes, st.device_total_bytes / 2);
  p = gpumem_alloc(64 * kMiB, 0, nullptr);
  EXPECT_NE(p, nullptr);
  gpumem_free(p, 64 * kMiB, 0, nullptr);
  EXPECT_EQ(gpumem_set_memory_fraction(1.5, 0), -1);
  EXPECT_NE(Text(gpumem_last_error).find("(0, 1]"), std::string::npos);
  EXPECT_EQ(gpumem_set_capacity(0, 0), -1);
}

TEST_F(CApiTest, FractionSetBeforeTheDeviceStartsIsApplied) {
  setenv("GPUMEM_CAPACITY", "1G", 1);  // the simulated device is 1 GiB
  ResetRegistryForTesting();
  ASSERT_EQ(gpumem_set_memory_fraction(0.25, 1), 0);
  void* p = gpumem_alloc(4096, 1, nullptr);
  ASSERT_NE(p, nullptr);
  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(1, &st), 0);
  EXPECT_EQ(st.capacity_bytes, 256 * kMiB);
  EXPECT_EQ(st.device_total_bytes, 1024 * kMiB);
  gpumem_free(p, 4096, 1, nullptr);
  EXPECT_EQ(gpumem_stats(0, &st), -1);  // device 0 never started
}

// The simulated device needs no grant (as cudaMalloc's memory); a device that cannot start
// is an error with its reason. The VMM backend's grants: tests/cuda_fake.
TEST_F(CApiTest, PeerAccessStartsTheDeviceAndNamesAFailure) {
  ResetRegistryForTesting();
  EXPECT_EQ(gpumem_enable_peer_access(1, 0), 0);
  gpumem_stats_t st;
  EXPECT_EQ(gpumem_stats(1, &st), 0);  // started
  EXPECT_EQ(gpumem_enable_peer_access(-1, 0), -1);
  EXPECT_NE(Text(gpumem_last_error).find("-1"), std::string::npos) << Text(gpumem_last_error);
}

TEST_F(CApiTest, BadConfigurationStopsStartWithTheVariableNamed) {
  setenv("GPUMEM_BACKEND", "tpu", 1);
  ResetRegistryForTesting();
  std::string error = Text(gpumem_config_error);
  EXPECT_NE(error.find("GPUMEM_BACKEND='tpu'"), std::string::npos) << error;
  EXPECT_NE(error.find("auto, vmm, cudamalloc or sim"), std::string::npos) << error;
  EXPECT_EQ(gpumem_alloc(4096, 0, nullptr), nullptr);
  EXPECT_NE(Text(gpumem_last_error).find("GPUMEM_BACKEND"), std::string::npos);
}

TEST_F(CApiTest, GoodConfigurationHasNoError) {
  char buf[8] = "x";
  EXPECT_EQ(gpumem_config_error(buf, sizeof buf), 0u);
  EXPECT_STREQ(buf, "");
}

TEST_F(CApiTest, TraceRequestThatCannotBeHonouredIsAnError) {
  setenv("GPUMEM_TRACE", "/nonexistent-gpumem-dir/x.gpumem", 1);
  ResetRegistryForTesting();
  EXPECT_EQ(gpumem_alloc(4096, 0, nullptr), nullptr);
  EXPECT_NE(Text(gpumem_last_error).find("GPUMEM_TRACE"), std::string::npos)
      << Text(gpumem_last_error);
}

TEST_F(CApiTest, NegativeSizeIsRefused) {
  EXPECT_EQ(gpumem_alloc(-1, 0, nullptr), nullptr);
  EXPECT_EQ(gpumem_alloc(16, -3, nullptr), nullptr);
}

TEST_F(CApiTest, RecordStreamOnTheOnlyDevice) {
  void* p = gpumem_alloc(4096, 0, reinterpret_cast<CUstream_st*>(1));
  ASSERT_NE(p, nullptr);
  gpumem_record_stream(p, -1, reinterpret_cast<CUstream_st*>(2));
  gpumem_free(p, 4096, 0, reinterpret_cast<CUstream_st*>(1));
  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_EQ(st.allocated_bytes, 0u);
}

TEST_F(CApiTest, RecordStreamFindsTheOwningDevice) {
  void* on0 = gpumem_alloc(4096, 0, nullptr);
  void* on1 = gpumem_alloc(4096, 1, nullptr);
  ASSERT_NE(on0, nullptr);
  ASSERT_NE(on1, nullptr);
  testing::internal::CaptureStderr();
  gpumem_record_stream(on1, -1, reinterpret_cast<CUstream_st*>(2));
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  // A pointer no device owns is reported, not silently ignored.
  testing::internal::CaptureStderr();
  int not_ours = 0;
  gpumem_record_stream(&not_ours, -1, reinterpret_cast<CUstream_st*>(2));
  EXPECT_NE(testing::internal::GetCapturedStderr().find("not a live gpumem block"),
            std::string::npos);
  gpumem_free(on0, 4096, 0, nullptr);
  gpumem_free(on1, 4096, 1, nullptr);
}

TEST_F(CApiTest, PoolBlocksStayInTheirPoolUntilReleased) {
  constexpr uint64_t kPool = 42;
  void* a = gpumem_alloc_in_pool(8 * kMiB, 0, nullptr, kPool);
  void* b = gpumem_alloc_in_pool(4096, 0, nullptr, kPool);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  void* live[4] = {};
  EXPECT_EQ(gpumem_pool_live_blocks(0, kPool, live, 4), 2u);
  EXPECT_EQ(gpumem_pool_live_blocks(0, kPool, nullptr, 0), 2u);  // the count alone
  EXPECT_EQ(std::set<void*>(live, live + 2), (std::set<void*>{a, b}));
  EXPECT_EQ(gpumem_block_device(a), 0);
  gpumem_free(a, 8 * kMiB, -1, nullptr);  // a deleter that knows only the pointer
  EXPECT_EQ(gpumem_block_device(a), -1);
  void* c = gpumem_alloc(8 * kMiB, 0, nullptr);
  EXPECT_NE(c, a);  // the default pool never gets the pool's block
  gpumem_free(c, 8 * kMiB, 0, nullptr);
  gpumem_empty_cache(0);
  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_GE(st.reserved_bytes, 8 * kMiB);  // the pool is in use: its memory stays
  gpumem_release_pool(0, kPool);
  gpumem_free(b, 4096, -1, nullptr);  // its last block: the pool's memory goes
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_EQ(st.reserved_bytes, 0u);
  EXPECT_EQ(Sim().counters().physical_bytes, 0u);
}

TEST_F(CApiTest, AllocAtPutsAPoolBlockBackWhereItWas) {
  constexpr uint64_t kPool = 9;
  void* a = gpumem_alloc_in_pool(5 * kMiB, 0, nullptr, kPool);
  void* b = gpumem_alloc_in_pool(1000, 0, nullptr, kPool);
  ASSERT_NE(a, nullptr);
  gpumem_free(a, 0, -1, nullptr);
  EXPECT_EQ(gpumem_alloc_at(a, 5 * kMiB, 0, nullptr, kPool), a);
  EXPECT_EQ(gpumem_alloc_at(b, 1000, 0, nullptr, kPool), nullptr);  // b is live
  char why[256];
  gpumem_last_error(why, sizeof(why));
  EXPECT_NE(std::string(why).find("not free"), std::string::npos) << why;
  EXPECT_EQ(gpumem_alloc_at(a, 5 * kMiB, 7, nullptr, kPool), nullptr);  // never started
  gpumem_free(a, 0, -1, nullptr);
  gpumem_free(b, 0, -1, nullptr);
  gpumem_release_pool(0, kPool);
}

TEST_F(CApiTest, EmptyPoolCacheKeepsLiveBlocks) {
  constexpr uint64_t kPool = 5;
  void* live = gpumem_alloc_in_pool(4 * kMiB, 0, nullptr, kPool);
  void* gone = gpumem_alloc_in_pool(6 * kMiB, 0, reinterpret_cast<CUstream_st*>(3), kPool);
  gpumem_free(gone, 6 * kMiB, 0, reinterpret_cast<CUstream_st*>(3));
  const std::uint64_t before = Sim().counters().physical_bytes;
  gpumem_empty_pool_cache(0, kPool);
  EXPECT_EQ(Sim().counters().physical_bytes, before - 6 * kMiB);
  EXPECT_TRUE(Sim().IsAccessible(reinterpret_cast<DevicePtr>(live), 4 * kMiB));
  gpumem_free(live, 4 * kMiB, 0, nullptr);
}

// Unset or auto, the page is a share of the device's cap (allocator/page_size.h): 8 MiB
// on the simulated 80 GiB device, the 2 MiB granule under a 16 GiB cap; asked, as asked.
TEST_F(CApiTest, PageFollowsTheDeviceCapUnlessAsked) {
  struct Case {
    const char* page_size;  // null: unset
    const char* capacity;   // null: the simulated device's 80 GiB
    std::uint64_t page;
  };
  for (const Case& c : {Case{nullptr, nullptr, 8 * kMiB}, Case{"auto", nullptr, 8 * kMiB},
                        Case{nullptr, "16G", 2 * kMiB}, Case{"auto", "40G", 4 * kMiB},
                        Case{"4M", nullptr, 4 * kMiB}}) {
    SCOPED_TRACE(::testing::Message() << (c.page_size ? c.page_size : "unset") << " on "
                                      << (c.capacity ? c.capacity : "80G"));
    if (c.page_size != nullptr) {
      setenv("GPUMEM_PAGE_SIZE", c.page_size, 1);
    } else {
      unsetenv("GPUMEM_PAGE_SIZE");
    }
    if (c.capacity != nullptr) {
      setenv("GPUMEM_CAPACITY", c.capacity, 1);
    } else {
      unsetenv("GPUMEM_CAPACITY");
    }
    ResetRegistryForTesting();
    void* p = gpumem_alloc(3 * kMiB, 0, nullptr);
    ASSERT_NE(p, nullptr);
    // 3 MiB takes whole pages: one of 4 or 8 MiB, two of 2 MiB.
    EXPECT_EQ(Sim().counters().physical_bytes, (3 * kMiB + c.page - 1) / c.page * c.page);
    const std::string json = DeviceText(gpumem_snapshot_json, 0);
    EXPECT_NE(json.find("\"page_bytes\":" + std::to_string(c.page)), std::string::npos) << json;
    const std::string summary = DeviceText(gpumem_memory_summary, 0);
    EXPECT_NE(summary.find("pages of " + std::to_string(c.page / kMiB) + " MiB)"),
              std::string::npos)
        << summary;
    gpumem_free(p, 3 * kMiB, 0, nullptr);
  }
}

TEST_F(CApiTest, FreeWithoutADeviceFindsTheOwner) {
  void* on0 = gpumem_alloc(4096, 0, nullptr);
  void* on1 = gpumem_alloc_in_pool(3 * kMiB, 1, nullptr, 9);
  ASSERT_NE(on0, nullptr);
  ASSERT_NE(on1, nullptr);
  EXPECT_EQ(gpumem_block_device(on0), 0);
  EXPECT_EQ(gpumem_block_device(on1), 1);
  int not_ours = 0;
  EXPECT_EQ(gpumem_block_device(&not_ours), -1);
  gpumem_free(on1, 3 * kMiB, -1, nullptr);
  gpumem_free(on0, 4096, -1, nullptr);
  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(-1, &st), 0);
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.free_count, 2u);
  testing::internal::CaptureStderr();
  gpumem_free(&not_ours, 4, -1, nullptr);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("not a live gpumem block"),
            std::string::npos);
}

TEST_F(CApiTest, CaptureMakesNoSynchronizeAndDefersCrossStreamFrees) {
  auto* s1 = reinterpret_cast<CUstream_st*>(1);
  void* x = gpumem_alloc(8 * kMiB, 0, s1);
  ASSERT_NE(x, nullptr);
  gpumem_record_stream(x, 0, reinterpret_cast<CUstream_st*>(2));
  gpumem_capture_begin(0);
  const std::uint64_t syncs = Sim().counters().synchronizes;
  const std::uint64_t unmaps = Sim().counters().unmaps;
  const std::size_t events = Sim().live_events();
  gpumem_free(x, 8 * kMiB, 0, s1);
  void* y = gpumem_alloc_in_pool(32 * kMiB, 0, s1, 1);
  ASSERT_NE(y, nullptr);
  gpumem_empty_cache(0);
  EXPECT_EQ(Sim().counters().synchronizes, syncs);
  EXPECT_EQ(Sim().counters().unmaps, unmaps);
  EXPECT_EQ(Sim().live_events(), events);
  gpumem_detailed_stats_t d;
  ASSERT_EQ(gpumem_detailed_stats(0, &d), 0);
  EXPECT_EQ(d.active[0].current, 2);  // x waits for stream 2
  EXPECT_EQ(d.allocation[0].current, 1);
  gpumem_capture_end(0);
  gpumem_free(y, 32 * kMiB, 0, s1);
  gpumem_release_pool(0, 1);
  void* z = gpumem_alloc(4096, 0, s1);  // collects x (sim events complete at once)
  ASSERT_EQ(gpumem_detailed_stats(0, &d), 0);
  EXPECT_EQ(d.active[0].current, 1);
  gpumem_free(z, 4096, 0, s1);
}

TEST_F(CApiTest, DetailedStatsAndTheirReset) {
  gpumem_detailed_stats_t d;
  EXPECT_EQ(gpumem_detailed_stats(0, &d), -1);  // not started
  void* small = gpumem_alloc(1000, 0, nullptr);
  void* large = gpumem_alloc(3 * kMiB, 0, nullptr);
  gpumem_free(small, 1000, 0, nullptr);
  ASSERT_EQ(gpumem_detailed_stats(0, &d), 0);
  EXPECT_EQ(d.allocation[0].current, 1);
  EXPECT_EQ(d.allocation[0].peak, 2);
  EXPECT_EQ(d.allocation[0].allocated, 2);
  EXPECT_EQ(d.allocation[0].freed, 1);
  EXPECT_EQ(d.allocation[1].allocated, 1);
  EXPECT_EQ(d.allocated_bytes[2].current, static_cast<int64_t>(3 * kMiB));
  EXPECT_EQ(d.allocated_bytes[0].peak, static_cast<int64_t>(3 * kMiB + 1000));
  EXPECT_EQ(d.reserved_bytes[0].current,
            static_cast<int64_t>(Sim().counters().physical_bytes));
  EXPECT_EQ(d.segment[1].current, 1);  // one slab
  EXPECT_EQ(d.num_device_alloc, static_cast<int64_t>(Sim().counters().physical_creates));
  gpumem_reset_accumulated(0);
  ASSERT_EQ(gpumem_detailed_stats(0, &d), 0);
  EXPECT_EQ(d.allocation[0].allocated, 0);
  EXPECT_EQ(d.allocation[0].freed, 0);
  EXPECT_EQ(d.allocation[0].current, 1);
  EXPECT_EQ(d.num_device_alloc, 0);
  gpumem_free(large, 3 * kMiB, 0, nullptr);
}

TEST_F(CApiTest, LayoutCoversEverySegment) {
  void* a = gpumem_alloc(1000, 0, nullptr);
  void* b = gpumem_alloc(5 * kMiB + 3, 0, nullptr);
  void* c = gpumem_alloc_in_pool(3 * kMiB, 0, nullptr, 8);
  size_t blocks = 0;
  const size_t segments = gpumem_layout(0, nullptr, 0, nullptr, 0, &blocks);
  ASSERT_GE(segments, 3u);
  std::vector<gpumem_segment_t> segs(segments);
  std::vector<gpumem_block_t> blks(blocks);
  ASSERT_EQ(gpumem_layout(0, segs.data(), segs.size(), blks.data(), blks.size(), &blocks),
            segments);
  size_t at = 0;
  std::uint64_t requested = 0;
  int small = 0, in_pool = 0;
  for (const gpumem_segment_t& s : segs) {
    std::uint64_t total = 0;
    for (uint32_t i = 0; i < s.block_count; ++i) total += blks[at + i].size;
    at += s.block_count;
    EXPECT_EQ(total, s.total_size);
    requested += s.requested_size;
    small += s.is_small;
    in_pool += s.pool == 8;
  }
  EXPECT_EQ(at, blocks);
  EXPECT_EQ(requested, 1000 + 5 * kMiB + 3 + 3 * kMiB);
  EXPECT_EQ(small, 1);
  EXPECT_EQ(in_pool, 1);
  EXPECT_EQ(gpumem_layout(7, segs.data(), segs.size(), blks.data(), blks.size(), &blocks), 0u);
  EXPECT_EQ(blocks, 0u);
  gpumem_free(a, 1000, 0, nullptr);
  gpumem_free(b, 5 * kMiB + 3, 0, nullptr);
  gpumem_free(c, 3 * kMiB, 0, nullptr);
}

TEST_F(CApiTest, SummaryAndSnapshotCarryTheFigures) {
  void* p = gpumem_alloc(3 * kMiB, 0, nullptr);
  ASSERT_NE(p, nullptr);
  const std::uint64_t first = gpumem_step();  // the step count is per process
  EXPECT_EQ(gpumem_step(), first + 1);
  std::string summary = DeviceText(gpumem_memory_summary, 0);
  EXPECT_NE(summary.find("sim backend"), std::string::npos) << summary;
  EXPECT_NE(summary.find("allocated"), std::string::npos) << summary;
  EXPECT_NE(summary.find("reserved"), std::string::npos) << summary;
  std::string json = DeviceText(gpumem_snapshot_json, -1);
  EXPECT_NE(json.find("\"allocated_bytes\":3145728"), std::string::npos) << json;
  EXPECT_NE(json.find("\"backend\":\"sim\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"physical_bytes\""), std::string::npos) << json;
  // One thread never contends, so its caches never start: nothing is held in them.
  EXPECT_NE(json.find("\"thread_cached_bytes\":0"), std::string::npos) << json;
  EXPECT_NE(summary.find("free in per-thread caches 0"), std::string::npos) << summary;
  // A short buffer gets a NUL-terminated prefix and the full length back.
  char small[10];
  size_t need = gpumem_snapshot_json(0, small, sizeof small);
  EXPECT_GT(need, sizeof small);
  EXPECT_EQ(small[9], '\0');
  gpumem_free(p, 3 * kMiB, 0, nullptr);
}

TEST_F(CApiTest, ManyThreadsAllocateAndFreeAtOnce) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 300;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      auto* stream = reinterpret_cast<CUstream_st*>(static_cast<std::uintptr_t>(t % 3));
      std::vector<std::pair<void*, ssize_t>> live;
      for (int i = 0; i < kRounds; ++i) {
        ssize_t size = 512 * (1 + (i * 7 + t) % 64) * ((i % 17 == 0) ? 2048 : 1);
        void* p = gpumem_alloc(size, 0, stream);
        ASSERT_NE(p, nullptr);
        live.emplace_back(p, size);
        if (live.size() > 8) {
          gpumem_free(live.front().first, live.front().second, 0, stream);
          live.erase(live.begin());
        }
      }
      for (auto& [p, size] : live) gpumem_free(p, size, 0, stream);
    });
  }
  for (auto& th : threads) th.join();
  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_EQ(st.allocated_bytes, 0u);
  EXPECT_EQ(st.alloc_count, static_cast<std::uint64_t>(kThreads * kRounds));
  EXPECT_EQ(st.free_count, st.alloc_count);
}

}  // namespace
}  // namespace gpumem::hooks
