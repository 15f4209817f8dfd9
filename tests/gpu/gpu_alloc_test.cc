// libgpumem's C ABI on a real GPU, for each CUDA backend (vmm, cudamalloc). Every block is
// written by device work (cuMemsetD32Async, a fill kernel) and read back, so overlapping
// or unmapped blocks fail. Skipped, with the reason, where there is no CUDA device.
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "allocator/caching_allocator.h"
#include "allocator/cuda_driver.h"
#include "allocator/cuda_vmm_backend.h"
#include "allocator/fault_injecting_backend.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "hooks/device_registry.h"
#include "hooks/gpumem.h"

namespace gpumem {
namespace {

constexpr std::size_t kMiB = 1 << 20;

#define CU_OK(call) ASSERT_EQ((call), CUDA_SUCCESS) << #call

class GpuAllocTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    auto driver = cuda::Driver();
    if (!driver.ok()) GTEST_SKIP() << "no CUDA device: " << driver.status().message();
    api_ = *driver;
    setenv("GPUMEM_BACKEND", GetParam(), 1);
    setenv("GPUMEM_LOG_OOM", "0", 1);
    // The cases count in 2 MiB pages under small caps; an 80 GB card's default is 8 MiB.
    setenv("GPUMEM_PAGE_SIZE", "2M", 1);
    unsetenv("GPUMEM_CAPACITY");
    hooks::ResetRegistryForTesting();
    // Start the device (and its primary context) with a first block.
    void* p = gpumem_alloc(512, 0, nullptr);
    ASSERT_NE(p, nullptr) << LastError();
    gpumem_free(p, 512, 0, nullptr);
    ASSERT_STREQ(gpumem_backend_name(0), GetParam());
    CU_OK(api_->cuDevicePrimaryCtxRetain(&ctx_, 0));
    CU_OK(api_->cuCtxSetCurrent(ctx_));
  }
  void TearDown() override {
    if (api_ == nullptr) return;
    api_->cuCtxSynchronize();
    gpumem_empty_cache(-1);
    hooks::ResetRegistryForTesting();
    api_->cuDevicePrimaryCtxRelease(0);
  }
  static std::string LastError() {
    char buf[1024];
    gpumem_last_error(buf, sizeof buf);
    return buf;
  }
  // Fills the block with `value` on `stream` (a device kernel).
  void Fill(void* p, std::size_t bytes, std::uint32_t value, CUstream stream) {
    CU_OK(api_->cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(p), value, bytes / 4, stream));
  }
  // Reads the block back and checks every word.
  void Check(void* p, std::size_t bytes, std::uint32_t value) {
    std::vector<std::uint32_t> host(bytes / 4);
    CU_OK(api_->cuMemcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(p), bytes));
    std::size_t bad = 0;
    for (std::uint32_t w : host) bad += (w != value);
    ASSERT_EQ(bad, 0u) << "block " << p << " of " << bytes << " bytes";
  }
  std::uint64_t DriverFree() {
    std::size_t free_b = 0, total = 0;
    api_->cuMemGetInfo(&free_b, &total);
    return free_b;
  }

  const cuda::DriverApi* api_ = nullptr;
  CUcontext ctx_ = nullptr;
};

TEST_P(GpuAllocTest, EveryBlockIsWritableAndDistinct) {
  const std::size_t sizes[] = {512, 4096, 65536, 1 * kMiB, 3 * kMiB + 512, 16 * kMiB,
                               100 * kMiB};
  std::vector<std::pair<void*, std::size_t>> blocks;
  std::uint32_t tag = 1;
  for (int round = 0; round < 4; ++round) {
    for (std::size_t size : sizes) {
      void* p = gpumem_alloc(size, 0, nullptr);
      ASSERT_NE(p, nullptr) << LastError();
      Fill(p, size, tag + static_cast<std::uint32_t>(blocks.size()), nullptr);
      blocks.emplace_back(p, size);
    }
  }
  CU_OK(api_->cuCtxSynchronize());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    Check(blocks[i].first, blocks[i].second, tag + static_cast<std::uint32_t>(i));
  }
  for (auto& [p, size] : blocks) gpumem_free(p, size, 0, nullptr);
  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_EQ(st.allocated_bytes, 0u);
}

TEST_P(GpuAllocTest, ThreadsOnTheirOwnStreams) {
  constexpr int kThreads = 6;
  std::atomic<int> failures{0};
  // Destroyed once every thread is done: gpumem may order another stream after one of
  // these (an event recorded on it) as long as it runs (gpumem.h, gpumem_alloc).
  std::vector<CUstream> streams(kThreads, nullptr);
  for (CUstream& stream : streams) CU_OK(api_->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // A fresh thread has no current context: gpumem must cope, and so must we.
      if (api_->cuCtxSetCurrent(ctx_) != CUDA_SUCCESS) return void(++failures);
      CUstream stream = streams[t];
      auto* s = reinterpret_cast<CUstream_st*>(stream);
      for (int i = 0; i < 40; ++i) {
        std::size_t size = (i % 5 == 0) ? (4 + i % 7) * kMiB : 512 * (1 + (i * 13 + t) % 300);
        size = (size + 3) & ~std::size_t{3};
        void* p = gpumem_alloc(size, 0, s);
        if (p == nullptr) return void(++failures);
        std::uint32_t value = 0x1000u * t + i;
        api_->cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(p), value, size / 4, stream);
        api_->cuStreamSynchronize(stream);
        std::vector<std::uint32_t> host(size / 4);
        api_->cuMemcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(p), size);
        for (std::uint32_t w : host) {
          if (w != value) {
            ++failures;
            break;
          }
        }
        gpumem_free(p, size, 0, s);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  gpumem_empty_cache(0);
  CU_OK(api_->cuCtxSynchronize());
  for (CUstream stream : streams) CU_OK(api_->cuStreamDestroy(stream));
}

// A block used on a second stream (record_stream) is not handed out again while that
// stream's work is pending: the data written there survives the free.
TEST_P(GpuAllocTest, RecordStreamKeepsABlockUntilTheOtherStreamIsDone) {
  CUstream s1 = nullptr, s2 = nullptr;
  CU_OK(api_->cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CU_OK(api_->cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  auto* g1 = reinterpret_cast<CUstream_st*>(s1);
  constexpr std::size_t kBlock = 8 * kMiB;
  void* a = gpumem_alloc(kBlock, 0, g1);
  ASSERT_NE(a, nullptr);
  Fill(a, kBlock, 0x11111111u, s1);
  CU_OK(api_->cuStreamSynchronize(s1));
  // Keep s2 busy for a while (big fills elsewhere), then write the block there.
  void* busy = gpumem_alloc(1024 * kMiB, 0, g1);
  ASSERT_NE(busy, nullptr);
  for (int i = 0; i < 40; ++i) Fill(busy, 1024 * kMiB, i, s2);
  Fill(a, kBlock, 0x22222222u, s2);
  CUevent done = nullptr;
  CU_OK(api_->cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  CU_OK(api_->cuEventRecord(done, s2));
  gpumem_record_stream(a, 0, reinterpret_cast<CUstream_st*>(s2));
  gpumem_free(a, kBlock, 0, g1);
  // Same size, same stream: without the recorded use this would be `a` again.
  void* b = gpumem_alloc(kBlock, 0, g1);
  ASSERT_NE(b, nullptr);
  bool s2_pending = api_->cuEventQuery(done) == CUDA_ERROR_NOT_READY;
  if (s2_pending) {
    EXPECT_NE(b, a) << "a block was reused while another stream used it";
  }
  Fill(b, kBlock, 0x33333333u, s1);
  CU_OK(api_->cuCtxSynchronize());
  if (b != a) Check(a, kBlock, 0x22222222u);
  Check(b, kBlock, 0x33333333u);
  gpumem_free(b, kBlock, 0, g1);
  gpumem_free(busy, 1024 * kMiB, 0, g1);
  api_->cuEventDestroy(done);
  api_->cuStreamDestroy(s1);
  api_->cuStreamDestroy(s2);
  if (!s2_pending) GTEST_SKIP() << "the second stream finished too fast to tell";
}

TEST_P(GpuAllocTest, OutOfMemoryReturnsNullAndRecovers) {
  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  // More than the whole device: the driver itself refuses.
  EXPECT_EQ(gpumem_alloc(static_cast<ssize_t>(st.device_total_bytes + (1ull << 30)), 0,
                         nullptr),
            nullptr);
  EXPECT_NE(LastError().find("out of memory"), std::string::npos) << LastError();
  // Under a cap: gpumem's own limit.
  ASSERT_EQ(gpumem_set_capacity(256 * kMiB, 0), 0);
  void* ok = gpumem_alloc(128 * kMiB, 0, nullptr);
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(gpumem_alloc(200 * kMiB, 0, nullptr), nullptr);
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_GE(st.oom_count, 2u);
  EXPECT_LE(st.reserved_bytes, 256 * kMiB);
  gpumem_free(ok, 128 * kMiB, 0, nullptr);
  void* after = gpumem_alloc(200 * kMiB, 0, nullptr);
  EXPECT_NE(after, nullptr) << LastError();
  gpumem_free(after, 200 * kMiB, 0, nullptr);
}

TEST_P(GpuAllocTest, EmptyCacheGivesEveryByteBackToTheDriver) {
  CU_OK(api_->cuCtxSynchronize());
  gpumem_empty_cache(0);
  const std::uint64_t free_before = DriverFree();
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (std::size_t size : {512ul, 70000ul, 2 * kMiB, 37 * kMiB, 700 * kMiB}) {
    for (int i = 0; i < 3; ++i) {
      void* p = gpumem_alloc(size, 0, nullptr);
      ASSERT_NE(p, nullptr);
      blocks.emplace_back(p, size);
    }
  }
  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_GE(free_before - DriverFree(), st.allocated_bytes);  // the driver saw them
  for (auto& [p, size] : blocks) gpumem_free(p, size, 0, nullptr);
  gpumem_empty_cache(0);
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_EQ(st.reserved_bytes, 0u);
  // The driver has it all back, to its own 2 MiB rounding.
  const std::uint64_t free_after = DriverFree();
  EXPECT_LE(free_before - std::min(free_before, free_after), 2 * kMiB)
      << "before " << free_before << " after " << free_after;
}

// Idle pages stitched within one stream are lent: mapped at the new block's address while
// their old address stays mapped until the stream's queued work is done, with no device
// synchronize. Here the freed blocks still have a fill queued when the stitch happens; the
// new block's fill runs after it in stream order, so every block reads back right.
// A driver entry point the allocator itself never calls.
template <typename Fn>
Fn DriverSymbol(const char* name) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  return lib ? reinterpret_cast<Fn>(dlsym(lib, name)) : nullptr;
}

// A copy between two devices' blocks, as nn.DataParallel's scatter and gather make them:
// once the contexts have peer access (cudaDeviceEnablePeerAccess), gpumem grants each
// copying device access to the other's mappings (gpumem_enable_peer_access), and the
// copy arrives whole in both directions, for a small block and one of many pages.
TEST_P(GpuAllocTest, CopiesBetweenDevicesOnceAPeerIsGranted) {
  int count = 0;
  CU_OK(api_->cuDeviceGetCount(&count));
  if (count < 2) GTEST_SKIP() << "needs two GPUs, found " << count;
  auto can_access = DriverSymbol<decltype(&cuDeviceCanAccessPeer)>("cuDeviceCanAccessPeer");
  auto enable = DriverSymbol<decltype(&cuCtxEnablePeerAccess)>("cuCtxEnablePeerAccess");
  auto copy = DriverSymbol<decltype(&cuMemcpyDtoD)>("cuMemcpyDtoD_v2");
  ASSERT_TRUE(can_access && enable && copy);
  CUdevice d0 = 0, d1 = 0;
  CU_OK(api_->cuDeviceGet(&d0, 0));
  CU_OK(api_->cuDeviceGet(&d1, 1));
  int peer = 0;
  CU_OK(can_access(&peer, d0, d1));
  if (!peer) GTEST_SKIP() << "devices 0 and 1 have no peer access";
  CUcontext ctx1 = nullptr;
  CU_OK(api_->cuDevicePrimaryCtxRetain(&ctx1, d1));
  for (auto [from, to, from_ctx, to_ctx] : {std::tuple{0, 1, ctx_, ctx1},
                                            std::tuple{1, 0, ctx1, ctx_}}) {
    CU_OK(api_->cuCtxSetCurrent(from_ctx));
    const CUresult r = enable(to_ctx, 0);
    ASSERT_TRUE(r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) << r;
    ASSERT_EQ(gpumem_enable_peer_access(to, from), 0) << LastError();
    for (std::size_t size : {std::size_t{4096}, 64 * kMiB}) {
      void* src = gpumem_alloc(size, from, nullptr);
      void* dst = gpumem_alloc(size, to, nullptr);
      ASSERT_TRUE(src && dst) << LastError();
      Fill(src, size, 0xC0DE0000u + from, nullptr);
      CU_OK(api_->cuCtxSynchronize());
      CU_OK(copy(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), size));
      Check(dst, size, 0xC0DE0000u + from);
      gpumem_free(src, size, from, nullptr);
      gpumem_free(dst, size, to, nullptr);
    }
  }
  CU_OK(api_->cuCtxSetCurrent(ctx_));
  api_->cuDevicePrimaryCtxRelease(d1);
}

TEST_P(GpuAllocTest, StitchingWithinAStreamWaitsForNothingAndKeepsBlocksIntact) {
  if (std::string(GetParam()) != "vmm") GTEST_SKIP() << "only VMM stitches pages";
  constexpr std::size_t kPage = 2 * kMiB;
  constexpr int kBlocks = 32;
  CUstream stream = nullptr;
  CU_OK(api_->cuStreamCreate(&stream, 0));
  CU_OK(api_->cuCtxSynchronize());
  gpumem_empty_cache(0);
  ASSERT_EQ(gpumem_set_capacity(kBlocks * kPage, 0), 0);
  auto counters = [&] {
    std::string json(1 << 16, '\0');
    json.resize(gpumem_snapshot_json(0, json.data(), json.size()));
    return nlohmann::json::parse(json)["devices"][0]["backend_counters"];
  };
  std::vector<void*> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    void* p = gpumem_alloc(kPage, 0, stream);
    ASSERT_NE(p, nullptr) << LastError();
    Fill(p, kPage, 100 + static_cast<std::uint32_t>(i), stream);
    blocks.push_back(p);
  }
  // Every other block freed with its fill still queued: 16 idle pages in 16 places.
  for (int i = 0; i < kBlocks; i += 2) gpumem_free(blocks[i], kPage, 0, stream);
  const auto before = counters();
  gpumem_stats_t st;
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  const std::uint64_t stitches_before = st.stitch_count;
  void* big = gpumem_alloc(kBlocks / 2 * kPage, 0, stream);
  ASSERT_NE(big, nullptr) << LastError();
  Fill(big, kBlocks / 2 * kPage, 7, stream);
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_GT(st.stitch_count, stitches_before);
  EXPECT_EQ(counters()["synchronizes"], before["synchronizes"]) << "the stitch waited";
  EXPECT_EQ(counters()["unmaps"], before["unmaps"]) << "old addresses unmapped at once";
  CU_OK(api_->cuStreamSynchronize(stream));
  Check(big, kBlocks / 2 * kPage, 7);
  for (int i = 1; i < kBlocks; i += 2) {
    Check(blocks[static_cast<std::size_t>(i)], kPage, 100 + static_cast<std::uint32_t>(i));
  }
  // The stream ran: the next slow path (another stitch, two pages from two freed blocks)
  // unmaps the old addresses, still without waiting.
  gpumem_free(blocks[1], kPage, 0, stream);
  gpumem_free(blocks[3], kPage, 0, stream);
  void* again = gpumem_alloc(2 * kPage, 0, stream);
  ASSERT_NE(again, nullptr) << LastError();
  EXPECT_GT(counters()["unmaps"].get<std::uint64_t>(), before["unmaps"].get<std::uint64_t>());
  EXPECT_EQ(counters()["synchronizes"], before["synchronizes"]);
  Fill(again, 2 * kPage, 9, stream);
  CU_OK(api_->cuStreamSynchronize(stream));
  Check(again, 2 * kPage, 9);
  Check(big, kBlocks / 2 * kPage, 7);
  for (int i = 5; i < kBlocks; i += 2) {
    Check(blocks[static_cast<std::size_t>(i)], kPage, 100 + static_cast<std::uint32_t>(i));
  }
  gpumem_free(again, 2 * kPage, 0, stream);
  gpumem_free(big, kBlocks / 2 * kPage, 0, stream);
  for (int i = 5; i < kBlocks; i += 2) {
    gpumem_free(blocks[static_cast<std::size_t>(i)], kPage, 0, stream);
  }
  CU_OK(api_->cuStreamSynchronize(stream));
  gpumem_empty_cache(0);
  ASSERT_EQ(gpumem_stats(0, &st), 0);
  EXPECT_EQ(st.reserved_bytes, 0u);
  CU_OK(api_->cuStreamDestroy(stream));
}

// The CUDA backend named by the test's parameter, holding at most `capacity` bytes.
absl::StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(const std::string& name,
                                                         std::uint64_t capacity) {
  const CudaBackendOptions options{.device = 0, .capacity = capacity};
  if (name == "vmm") {
    absl::StatusOr<std::unique_ptr<CudaVmmBackend>> b = CudaVmmBackend::Create(options);
    if (!b.ok()) return b.status();
    return std::unique_ptr<Backend>(std::move(*b));
  }
  absl::StatusOr<std::unique_ptr<CudaMallocBackend>> b = CudaMallocBackend::Create(options);
  if (!b.ok()) return b.status();
  return std::unique_ptr<Backend>(std::move(*b));
}

// The allocator on the CUDA backend with device calls failing at random
// (FaultInjectingBackend: page creates, maps, unmaps, reservations, segments, event
// queries) on two streams, with record_stream and empty_cache. Every block is written by
// device work on its stream and read back before its free, so an overlap, or a page
// unmapped or reused under a block, shows. Every failure is an OOM; once the faults stop,
// every request that failed is served, and empty_cache gives every byte, mapping and
// address range back.
TEST_P(GpuAllocTest, InjectedDeviceFaultsAreOomsAndLeaveNothingBehind) {
  constexpr int kSteps = 1500;
  absl::StatusOr<std::unique_ptr<Backend>> device = MakeCudaBackend(GetParam(), 512 * kMiB);
  ASSERT_TRUE(device.ok()) << device.status();
  FaultInjectingBackend faults(**device, /*seed=*/19,
                               {.create = 0.1, .map = 0.1, .unmap = 0.2, .event_query = 0.3,
                                .reserve = 0.05, .segment = 0.1});
  std::unique_ptr<DeviceAllocator> alloc = MakeCachingAllocator(faults);
  CUstream streams[2] = {nullptr, nullptr};
  for (CUstream& s : streams) CU_OK(api_->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  struct Live {
    void* p;
    std::size_t words;
    std::uint32_t value;
  };
  std::vector<Live> live;
  std::vector<std::pair<std::size_t, int>> failed;  // size, stream
  std::mt19937 rng(19);
  auto stream_id = [&](int i) { return reinterpret_cast<StreamId>(streams[i]); };
  auto allocate = [&](std::size_t size, int stream) -> bool {
    absl::StatusOr<DevicePtr> p = alloc->Allocate(size, stream_id(stream));
    if (!p.ok()) {
      EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << p.status();
      failed.emplace_back(size, stream);
      return false;
    }
    live.push_back({reinterpret_cast<void*>(*p), size / 4, static_cast<std::uint32_t>(rng())});
    Fill(live.back().p, live.back().words * 4, live.back().value, streams[stream]);
    return true;
  };
  // Every write done, the block must still hold its own value.
  auto free_one = [&](std::size_t i) {
    CU_OK(api_->cuCtxSynchronize());
    Check(live[i].p, live[i].words * 4, live[i].value);
    alloc->Free(reinterpret_cast<DevicePtr>(live[i].p));
    live[i] = live.back();
    live.pop_back();
  };
  for (int step = 0; step < kSteps; ++step) {
    const unsigned op = rng() % 100;
    const int stream = static_cast<int>(rng() % 2);
    if (op < 50 || live.empty()) {
      const std::size_t size = op % 3 == 0   ? 4 + rng() % (256 << 10) / 4 * 4
                               : op % 3 == 1 ? kMiB + rng() % (8 * kMiB) / 4 * 4
                                             : (1 + rng() % 16) * 2 * kMiB;
      allocate(size, stream);
    } else if (op < 88) {
      free_one(rng() % live.size());
    } else if (op < 95) {
      // Used on the other stream too, then freed: the free waits for that stream's work.
      const std::size_t i = rng() % live.size();
      Fill(live[i].p, live[i].words * 4, live[i].value, streams[1 - stream]);
      alloc->RecordStream(reinterpret_cast<DevicePtr>(live[i].p), stream_id(1 - stream));
      free_one(i);
    } else {
      alloc->EmptyCache();
    }
    if (HasFatalFailure()) FAIL() << "step " << step;
  }
  const FaultCounts injected = faults.injected();
  EXPECT_GT(injected.total(), 0u);
  std::printf("%s: %d steps, %llu faults injected, %zu requests failed\n", GetParam(), kSteps,
              static_cast<unsigned long long>(injected.total()), failed.size());
  faults.set_rates({});
  while (!live.empty()) free_one(live.size() - 1);
  const std::vector<std::pair<std::size_t, int>> retry = failed;
  failed.clear();
  for (const auto& [size, stream] : retry) {
    ASSERT_TRUE(allocate(size, stream)) << size << " bytes after the faults stopped";
    free_one(live.size() - 1);
  }
  CU_OK(api_->cuCtxSynchronize());
  alloc->EmptyCache();
  EXPECT_EQ(alloc->stats().reserved_bytes, 0u);
  const BackendCounters c = (*device)->counters();
  EXPECT_EQ(c.physical_bytes, 0u);
  EXPECT_EQ(c.mapped_bytes, 0u);
  EXPECT_EQ(c.reserved_va_bytes, 0u);
  alloc.reset();
  for (CUstream s : streams) CU_OK(api_->cuStreamDestroy(s));
}

std::string BackendName(const ::testing::TestParamInfo<const char*>& param_info) {
  return param_info.param;
}
INSTANTIATE_TEST_SUITE_P(Backends, GpuAllocTest, ::testing::Values("vmm", "cudamalloc"),
                         BackendName);

}  // namespace
}  // namespace gpumem
