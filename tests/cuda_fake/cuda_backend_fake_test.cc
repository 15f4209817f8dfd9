// The CUDA VMM backend and the caching allocator on it, against a stand-in libcuda.so.1
// (fake_cuda.cc, put first on LD_LIBRARY_PATH by ctest): the driver calls gpumem makes
// and what it must never do, checked on machines without a GPU. Real kernels on real
// memory are tests/gpu/gpu_alloc_test.cc's job.
#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include <unistd.h>

#include "allocator/caching_allocator.h"
#include "allocator/cuda_vmm_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda_fake/fake_cuda.h"

namespace gpumem {
namespace {

constexpr std::size_t kPage = std::size_t{2} << 20;
const StreamId kStream = 0x5000;

FakeCudaCounters Fake() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto fn = lib ? reinterpret_cast<FakeCudaCountersFn>(dlsym(lib, "fake_cuda_counters")) : nullptr;
  if (fn == nullptr) {
    ADD_FAILURE() << "not the stand-in libcuda.so.1: run through ctest (LD_LIBRARY_PATH)";
    return {};
  }
  return fn();
}

class CudaBackendFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("FAKE_CUDA_RANGE_ACCESS");
    unsetenv("FAKE_CUDA_EVENTS_PENDING");
    unsetenv("FAKE_CUDA_SHUT_DOWN");
    absl::StatusOr<std::unique_ptr<CudaVmmBackend>> b = CudaVmmBackend::Create({});
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = *std::move(b);
    ASSERT_EQ(backend_->granularity(), kPage);
  }
  std::vector<PhysicalHandle> Create(int n) {
    std::vector<PhysicalHandle> handles;
    for (int i = 0; i < n; ++i) handles.push_back(*backend_->CreatePhysical(kPage));
    return handles;
  }
  std::unique_ptr<CudaVmmBackend> backend_;
};

TEST_F(CudaBackendFakeTest, MapsARunOfPagesWithOneAccessGrant) {
  const FakeCudaCounters before = Fake();
  DevicePtr va = *backend_->ReserveAddressRange(8 * kPage);
  std::vector<PhysicalHandle> h = Create(4);
  ASSERT_TRUE(backend_->MapPages(va, kPage, h.data(), h.size()).ok());
  FakeCudaCounters after = Fake();
  EXPECT_EQ(after.maps - before.maps, 4u);
  EXPECT_EQ(after.set_access_calls - before.set_access_calls, 1u);
  EXPECT_EQ(after.set_access_pages - before.set_access_pages, 4u);
  EXPECT_EQ(backend_->counters().maps, 4u);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(backend_->Unmap(va + i * kPage, kPage).ok());
  for (PhysicalHandle p : h) backend_->ReleasePhysical(p);
  backend_->ReleaseAddressRange(va, 8 * kPage);
  EXPECT_EQ(Fake().released_while_mapped, 0u);
}

unsigned AccessDevices(DevicePtr page) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  auto fn = lib ? reinterpret_cast<FakeCudaAccessDevicesFn>(dlsym(lib, "fake_cuda_access_devices"))
                : nullptr;
  return fn ? fn(page) : 0;
}

// A peer granted access (PyTorch's enablePeerAccess, for nn.DataParallel's copies) gets
// it on every page mapped now and on every page mapped later, whether one at a time or a
// run; granting it twice changes nothing.
TEST_F(CudaBackendFakeTest, APeerGetsAccessToEveryMappingNowAndLater) {
  DevicePtr va = *backend_->ReserveAddressRange(8 * kPage);
  std::vector<PhysicalHandle> h = Create(6);
  ASSERT_TRUE(backend_->MapPages(va, kPage, h.data(), 3).ok());
  ASSERT_TRUE(backend_->Map(va + 3 * kPage, kPage, h[3], 0).ok());
  ASSERT_TRUE(backend_->Unmap(va + kPage, kPage).ok());
  for (int i : {0, 2, 3}) EXPECT_EQ(AccessDevices(va + i * kPage), 0b01u) << i;

  ASSERT_TRUE(backend_->GrantPeerAccess(1).ok());
  ASSERT_TRUE(backend_->GrantPeerAccess(1).ok());
  for (int i : {0, 2, 3}) EXPECT_EQ(AccessDevices(va + i * kPage), 0b11u) << i;
  EXPECT_EQ(AccessDevices(va + kPage), 0u);  // unmapped: nothing to grant

  ASSERT_TRUE(backend_->Map(va + kPage, kPage, h[4], 0).ok());
  ASSERT_TRUE(backend_->MapPages(va + 4 * kPage, kPage, &h[5], 1).ok());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(AccessDevices(va + i * kPage), 0b11u) << i;
  EXPECT_FALSE(backend_->GrantPeerAccess(7).ok());  // no such device

  for (int i = 0; i < 5; ++i) ASSERT_TRUE(backend_->Unmap(va + i * kPage, kPage).ok());
  for (PhysicalHandle p : h) backend_->ReleasePhysical(p);
  backend_->ReleaseAddressRange(va, 8 * kPage);
  EXPECT_EQ(Fake().released_while_mapped, 0u);
}

// A block sent to another process: the pages under it are exported (from the page that
// holds its first byte to the one that holds its last), and mapped again one after the
// other at a new range that this device and its peers can use; releasing that range
// unmaps it and gives back every reference the import took.
TEST_F(CudaBackendFakeTest, PagesExportedAreMappedAgainInOrderAndGivenBack) {
  DevicePtr va = *backend_->ReserveAddressRange(4 * kPage);
  std::vector<PhysicalHandle> h = Create(3);
  ASSERT_TRUE(backend_->MapPages(va, kPage, h.data(), 3).ok());
  ASSERT_TRUE(backend_->GrantPeerAccess(1).ok());
  const FakeCudaCounters before = Fake();

  absl::StatusOr<ExportedPages> out = backend_->ExportPages(va + kPage / 2, kPage + 1);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->first_page, va);
  ASSERT_EQ(out->pages.size(), 2u);  // the block's bytes lie on the first two pages
  absl::StatusOr<DevicePtr> imported = backend_->ImportPages(out->pages);
  ASSERT_TRUE(imported.ok()) << imported.status();
  for (const ExportedPage& page : out->pages) close(page.fd);
  EXPECT_EQ(Fake().live_mappings, before.live_mappings + 2);
  EXPECT_EQ(Fake().handles_mapped_twice, 2u);  // the same pages, at two addresses
  for (int i : {0, 1}) EXPECT_EQ(AccessDevices(*imported + i * kPage), 0b11u) << i;

  ASSERT_TRUE(backend_->ReleaseImported(*imported).ok());
  EXPECT_FALSE(backend_->ReleaseImported(*imported).ok());
  EXPECT_EQ(Fake().live_mappings, before.live_mappings);
  EXPECT_EQ(Fake().handles_mapped_twice, 0u);
  ASSERT_TRUE(backend_->Unmap(va, kPage).ok());
  ASSERT_TRUE(backend_->Unmap(va + kPage, kPage).ok());
  ASSERT_TRUE(backend_->Unmap(va + 2 * kPage, kPage).ok());
  for (PhysicalHandle p : h) backend_->ReleasePhysical(p);
  backend_->ReleaseAddressRange(va, 4 * kPage);
  EXPECT_EQ(Fake().released_while_mapped, 0u);
  EXPECT_EQ(Fake().live_handles, before.live_handles - 3);  // no reference left behind
}

// Memory not mapped here, or with a gap under it, cannot be exported; nothing is left open.
TEST_F(CudaBackendFakeTest, ExportingUnmappedMemoryFailsAndSaysWhere) {
  DevicePtr va = *backend_->ReserveAddressRange(3 * kPage);
  std::vector<PhysicalHandle> h = Create(2);
  ASSERT_TRUE(backend_->Map(va, kPage, h[0], 0).ok());
  ASSERT_TRUE(backend_->Map(va + 2 * kPage, kPage, h[1], 0).ok());
  absl::StatusOr<ExportedPages> gap = backend_->ExportPages(va, 3 * kPage);
  ASSERT_FALSE(gap.ok());
  EXPECT_THAT(std::string(gap.status().message()), ::testing::HasSubstr("no mapped memory covers"));
  EXPECT_FALSE(backend_->ExportPages(va + 3 * kPage, 1).ok());
  EXPECT_FALSE(backend_->ImportPages({}).ok());
  ASSERT_TRUE(backend_->Unmap(va, kPage).ok());
  ASSERT_TRUE(backend_->Unmap(va + 2 * kPage, kPage).ok());
  for (PhysicalHandle p : h) backend_->ReleasePhysical(p);
  backend_->ReleaseAddressRange(va, 3 * kPage);
}

// A driver that refuses exportable pages still gives pages, which then cannot be sent.
TEST_F(CudaBackendFakeTest, PagesStillComeWhereTheDriverRefusesExportablePages) {
  setenv("FAKE_CUDA_NO_EXPORT", "1", 1);
  absl::StatusOr<std::unique_ptr<CudaVmmBackend>> plain = CudaVmmBackend::Create({});
  ASSERT_TRUE(plain.ok());
  absl::StatusOr<PhysicalHandle> page = (*plain)->CreatePhysical(kPage);
  unsetenv("FAKE_CUDA_NO_EXPORT");
  ASSERT_TRUE(page.ok()) << page.status();
  (*plain)->ReleasePhysical(*page);
}

// A peer granted while another thread maps page after page: no mapping misses it, whether
// it was mapped before the grant, during it or after.
TEST_F(CudaBackendFakeTest, APeerGrantedWhileAnotherThreadMapsReachesEveryPage) {
  constexpr int kPages = 64;
  DevicePtr va = *backend_->ReserveAddressRange(kPages * kPage);
  std::vector<PhysicalHandle> h = Create(kPages);
  std::atomic<int> mapped{0};
  std::thread mapper([&] {
    for (int i = 0; i < kPages; ++i) {
      ASSERT_TRUE(backend_->Map(va + i * kPage, kPage, h[i], 0).ok());
      mapped.store(i + 1);
    }
  });
  while (mapped.load() < kPages / 2) std::this_thread::yield();
  ASSERT_TRUE(backend_->GrantPeerAccess(1).ok());
  mapper.join();
  for (int i = 0; i < kPages; ++i) EXPECT_EQ(AccessDevices(va + i * kPage), 0b11u) << i;
  for (int i = 0; i < kPages; ++i) ASSERT_TRUE(backend_->Unmap(va + i * kPage, kPage).ok());
  for (PhysicalHandle p : h) backend_->ReleasePhysical(p);
  backend_->ReleaseAddressRange(va, kPages * kPage);
}

// The host's time inside the driver is counted, so a GPU run can tell what the
// allocator's device calls cost a step.
TEST_F(CudaBackendFakeTest, CountsTheHostTimeSpentInDriverCalls) {
  const std::uint64_t before = backend_->counters().host_call_ns;
  DevicePtr va = *backend_->ReserveAddressRange(8 * kPage);
  std::vector<PhysicalHandle> h = Create(4);
  setenv("FAKE_CUDA_MAP_US", "500", 1);
  ASSERT_TRUE(backend_->MapPages(va, kPage, h.data(), h.size()).ok());
  unsetenv("FAKE_CUDA_MAP_US");
  EXPECT_GE(backend_->counters().host_call_ns - before, 4u * 500'000u);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(backend_->Unmap(va + i * kPage, kPage).ok());
  for (PhysicalHandle p : h) backend_->ReleasePhysical(p);
  backend_->ReleaseAddressRange(va, 8 * kPage);
}

// A driver that refuses one grant over several mappings: the run is granted page by page,
// and every later run too.
TEST_F(CudaBackendFakeTest, FallsBackToAGrantPerPage) {
  setenv("FAKE_CUDA_RANGE_ACCESS", "0", 1);
  DevicePtr va = *backend_->ReserveAddressRange(8 * kPage);
  std::vector<PhysicalHandle> h = Create(6);
  FakeCudaCounters before = Fake();
  ASSERT_TRUE(backend_->MapPages(va, kPage, h.data(), 3).ok());
  FakeCudaCounters after = Fake();
  EXPECT_EQ(after.set_access_calls - before.set_access_calls, 3u);
  unsetenv("FAKE_CUDA_RANGE_ACCESS");
  before = after;
  ASSERT_TRUE(backend_->MapPages(va + 3 * kPage, kPage, h.data() + 3, 3).ok());
  EXPECT_EQ(Fake().set_access_calls - before.set_access_calls, 3u);  // it stays per page
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(backend_->Unmap(va + i * kPage, kPage).ok());
  for (PhysicalHandle p : h) backend_->ReleasePhysical(p);
  backend_->ReleaseAddressRange(va, 8 * kPage);
}

TEST_F(CudaBackendFakeTest, AFailedMapLeavesNothingMapped) {
  DevicePtr va = *backend_->ReserveAddressRange(2 * kPage);
  std::vector<PhysicalHandle> h = Create(3);
  const FakeCudaCounters before = Fake();
  // Three pages do not fit a two-page reservation: the third map fails, two are undone.
  EXPECT_FALSE(backend_->MapPages(va, kPage, h.data(), 3).ok());
  EXPECT_EQ(Fake().live_mappings, before.live_mappings);
  EXPECT_EQ(backend_->counters().mapped_bytes, 0u);
  for (PhysicalHandle p : h) backend_->ReleasePhysical(p);
  backend_->ReleaseAddressRange(va, 2 * kPage);
}

// Eight one-page blocks on one stream, every other one freed, then four pages' worth on
// `stream`: with no growth budget, a stitch of those idle pages (within the stream by
// default). `blocks` keeps all eight (the odd ones live).
DevicePtr StitchOverScatteredPages(DeviceAllocator& alloc, std::vector<DevicePtr>* blocks,
                                   StreamId stream = kStream) {
  for (int i = 0; i < 8; ++i) blocks->push_back(*alloc.Allocate(kPage, kStream));
  for (int i = 0; i < 8; i += 2) alloc.Free((*blocks)[static_cast<std::size_t>(i)]);
  return *alloc.Allocate(4 * kPage, stream);
}

// Eight pages, every other block freed, then four pages' worth: a stitch within one
// stream. It lends the idle pages (a handle mapped at two addresses), synchronizes
// nothing, and unmaps the old addresses once the stream's event completed.
// Tensors freed while the interpreter exits reach the allocator after the driver has
// shut down: their events count as done (no work runs any more), and nothing is printed
// for each call the driver refuses then.
TEST_F(CudaBackendFakeTest, AfterTheDriverShutDownEventsAreDoneAndFailuresQuiet) {
  setenv("FAKE_CUDA_EVENTS_PENDING", "1", 1);
  const EventHandle event = backend_->RecordEvent(kStream);
  PhysicalHandle page = Create(1)[0];
  const DevicePtr va = *backend_->ReserveAddressRange(kPage);
  ASSERT_TRUE(backend_->Map(va, kPage, page, 0).ok());
  EXPECT_FALSE(backend_->EventCompleted(event));
  setenv("FAKE_CUDA_SHUT_DOWN", "1", 1);
  ::testing::internal::CaptureStderr();
  EXPECT_TRUE(backend_->EventCompleted(event));
  EXPECT_FALSE(backend_->Unmap(va, kPage).ok());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  unsetenv("FAKE_CUDA_SHUT_DOWN");
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(backend_->Unmap(va + kPage, kPage).code() != absl::StatusCode::kOk);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), ::testing::HasSubstr("cuMemUnmap"));
  ASSERT_TRUE(backend_->Unmap(va, kPage).ok());
  backend_->ReleaseEvent(event);
  backend_->ReleasePhysical(page);
  backend_->ReleaseAddressRange(va, kPage);
}

TEST_F(CudaBackendFakeTest, StitchLendsPagesUntilTheStreamRan) {
  setenv("FAKE_CUDA_EVENTS_PENDING", "1", 1);
  const FakeCudaCounters start = Fake();
  {
    auto alloc = MakeCachingAllocator(*backend_, {.new_page_headroom = 0,
                                                  .max_new_page_headroom = 0});
    std::vector<DevicePtr> blocks;
    const DevicePtr big = StitchOverScatteredPages(*alloc, &blocks);
    FakeCudaCounters now = Fake();
    EXPECT_EQ(now.synchronizes, start.synchronizes);
    EXPECT_EQ(now.handles_mapped_twice, 3u);
    EXPECT_EQ(now.unmaps, start.unmaps);
    EXPECT_EQ(alloc->stats().stitch_count, 1u);
    // Another slow path while the stream's work is pending: the old addresses stay.
    const DevicePtr more = *alloc->Allocate(16 * kPage, kStream);
    EXPECT_EQ(Fake().handles_mapped_twice, 3u);
    // The stream ran (a synchronize completes the fake's events): the next slow path
    // unmaps them, without a synchronize of its own.
    const cuda::DriverApi* api = *cuda::Driver();
    ASSERT_EQ(api->cuCtxSynchronize(), CUDA_SUCCESS);
    const std::uint64_t syncs = Fake().synchronizes;
    const DevicePtr third = *alloc->Allocate(16 * kPage, kStream);
    now = Fake();
    EXPECT_EQ(now.handles_mapped_twice, 0u);
    EXPECT_EQ(now.unmaps - start.unmaps, 3u);
    EXPECT_EQ(now.synchronizes, syncs);
    alloc->Free(big);
    alloc->Free(more);
    alloc->Free(third);
    for (int i = 1; i < 8; i += 2) alloc->Free(blocks[static_cast<std::size_t>(i)]);
  }
  const FakeCudaCounters end = Fake();
  EXPECT_EQ(end.released_while_mapped, 0u);
  EXPECT_EQ(end.live_mappings, 0u);
  EXPECT_EQ(end.live_handles, 0u);
}

// Another stream's scattered idle pages, stitched for this stream: lent as well, with
// this stream made to wait for the other's event (cuStreamWaitEvent) instead of the host
// waiting for the device.
TEST_F(CudaBackendFakeTest, StitchFromAnotherStreamWaitsOnTheDevice) {
  setenv("FAKE_CUDA_EVENTS_PENDING", "1", 1);
  const FakeCudaCounters start = Fake();
  {
    auto alloc = MakeCachingAllocator(*backend_, {.new_page_headroom = 0,
                                                  .max_new_page_headroom = 0});
    std::vector<DevicePtr> blocks;
    const DevicePtr big = StitchOverScatteredPages(*alloc, &blocks, kStream + 1);
    const FakeCudaCounters now = Fake();
    EXPECT_EQ(now.synchronizes, start.synchronizes);
    EXPECT_EQ(now.stream_waits - start.stream_waits, 1u);
    EXPECT_EQ(backend_->counters().stream_waits, 1u);
    EXPECT_EQ(now.handles_mapped_twice, 4u);
    EXPECT_EQ(alloc->stats().cross_stream_lends, 1u);
    alloc->Free(big);
    for (int i = 1; i < 8; i += 2) alloc->Free(blocks[static_cast<std::size_t>(i)]);
  }
  const FakeCudaCounters end = Fake();
  EXPECT_EQ(end.released_while_mapped, 0u);
  EXPECT_EQ(end.live_mappings, 0u);
  EXPECT_EQ(end.live_handles, 0u);
}

// EmptyCache with lent pages still waiting: it synchronizes, unmaps them and returns
// every page, never releasing one that is still mapped.
TEST_F(CudaBackendFakeTest, EmptyCacheRetiresLentPagesFirst) {
  setenv("FAKE_CUDA_EVENTS_PENDING", "1", 1);
  auto alloc = MakeCachingAllocator(*backend_, {.new_page_headroom = 0,
                                                .max_new_page_headroom = 0});
  std::vector<DevicePtr> blocks;
  const DevicePtr big = StitchOverScatteredPages(*alloc, &blocks);
  ASSERT_EQ(Fake().handles_mapped_twice, 3u);
  alloc->Free(big);
  for (int i = 1; i < 8; i += 2) alloc->Free(blocks[static_cast<std::size_t>(i)]);
  alloc->EmptyCache();
  const FakeCudaCounters end = Fake();
  EXPECT_EQ(end.handles_mapped_twice, 0u);
  EXPECT_EQ(end.released_while_mapped, 0u);
  EXPECT_EQ(end.live_mappings, 0u);
  EXPECT_EQ(end.live_handles, 0u);
  EXPECT_EQ(alloc->stats().reserved_bytes, 0u);
}

}  // namespace
}  // namespace gpumem
