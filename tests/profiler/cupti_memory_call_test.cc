// Decoding of CUPTI callback parameters into memory calls, with parameter blocks built
// here as the driver would fill them (no GPU needed).
// cupti.h (through memory_call.h) brings the callback ids and the parameter structs;
// those generated headers have no include guards, so they are not included again here.
#include "profiler/cupti/memory_call.h"

#include <gtest/gtest.h>

#include <set>

#include "profiler/cupti/trace_name.h"

namespace gpumem::cupti {
namespace {

using format::RecordType;

TEST(MemoryCallTest, DriverAllocReadsTheFilledOutputPointer) {
  CUdeviceptr ptr = 0x7f1200000000;
  cuMemAlloc_v2_params p{&ptr, 1 << 20};
  auto c = DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &p);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->type, RecordType::kSegmentAlloc);
  EXPECT_EQ(c->addr, 0x7f1200000000u);
  EXPECT_EQ(c->size, 1u << 20);
  EXPECT_STREQ(c->api, "cuMemAlloc_v2");
  EXPECT_FALSE(c->runtime);
  EXPECT_FALSE(c->host);
}

// A failed call of these makes gpumem give idle memory back; frees, maps and pinned host
// memory do not.
TEST(MemoryCallTest, DeviceAllocationsAreTheCallsThatTakeDeviceMemory) {
  CUdeviceptr ptr = 0;
  cuMemAlloc_v2_params alloc{&ptr, 32 << 20};
  EXPECT_TRUE(
      TakesDeviceMemory(*DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &alloc)));
  void* out = nullptr;
  cudaMalloc_v3020_params rt{&out, 32 << 20};
  EXPECT_TRUE(TakesDeviceMemory(*DecodeRuntimeCall(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, &rt)));
  cuMemFree_v2_params f{0x1000};
  EXPECT_FALSE(TakesDeviceMemory(*DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, &f)));
  cudaHostAlloc_v3020_params host{&out, 8192, 0};
  EXPECT_FALSE(
      TakesDeviceMemory(*DecodeRuntimeCall(CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, &host)));
  cuMemMap_params map{0x1000, 2 << 20, 0, 0, 0};
  EXPECT_FALSE(TakesDeviceMemory(*DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemMap, &map)));
}

TEST(MemoryCallTest, AsyncCallsCarryTheirStream) {
  CUdeviceptr ptr = 0x1000;
  auto stream = reinterpret_cast<CUstream>(0xabc0);
  cuMemAllocAsync_params a{&ptr, 4096, stream};
  auto c = DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, &a);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->stream, 0xabc0u);
  cuMemFreeAsync_params f{0x1000, stream};
  c = DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, &f);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->type, RecordType::kSegmentFree);
  EXPECT_TRUE(c->frees);
  EXPECT_EQ(c->addr, 0x1000u);
  EXPECT_EQ(c->stream, 0xabc0u);
}

// Device allocations that are not stream-ordered keep their native frames (the library
// behind them); stream-ordered ones, which can come one per tensor, and frees do not.
TEST(MemoryCallTest, OnlyDeviceAllocationsOutsideStreamOrderNameTheirLibrary) {
  CUdeviceptr ptr = 0x1000;
  cuMemAlloc_v2_params alloc{&ptr, 32 << 20};
  EXPECT_TRUE(NamesItsLibrary(*DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, &alloc)));
  void* out = nullptr;
  cudaMalloc_v3020_params rt{&out, 32 << 20};
  EXPECT_TRUE(NamesItsLibrary(*DecodeRuntimeCall(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, &rt)));
  CUmemGenericAllocationHandle handle = 77;
  CUmemAllocationProp prop{};
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  cuMemCreate_params create{&handle, 2 << 20, &prop, 0};
  EXPECT_TRUE(NamesItsLibrary(*DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemCreate, &create)));

  cuMemAllocAsync_params async{&ptr, 4096, nullptr};  // the legacy stream: 0, still async
  auto c = DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, &async);
  EXPECT_TRUE(c->stream_ordered);
  EXPECT_FALSE(NamesItsLibrary(*c));
  cudaMallocAsync_v11020_params rt_async{&out, 4096, nullptr};
  EXPECT_FALSE(NamesItsLibrary(
      *DecodeRuntimeCall(CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, &rt_async)));
  cudaMallocFromPoolAsync_v11020_params pool{&out, 4096, nullptr, nullptr};
  EXPECT_FALSE(NamesItsLibrary(
      *DecodeRuntimeCall(CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020, &pool)));
  cuMemFreeAsync_params free_async{0x1000, nullptr};
  EXPECT_TRUE(DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, &free_async)
                  ->stream_ordered);
  cuMemFree_v2_params f{0x1000};
  EXPECT_FALSE(NamesItsLibrary(*DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, &f)));
  cudaHostAlloc_v3020_params host{&out, 8192, 0};
  EXPECT_FALSE(NamesItsLibrary(
      *DecodeRuntimeCall(CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, &host)));
}

TEST(MemoryCallTest, PinnedHostMemoryIsMarkedHost) {
  void* host = reinterpret_cast<void*>(0x5000);
  cudaHostAlloc_v3020_params p{&host, 8192, 0};
  auto c = DecodeRuntimeCall(CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, &p);
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->host);
  EXPECT_TRUE(c->runtime);
  EXPECT_EQ(c->addr, 0x5000u);
  EXPECT_EQ(c->size, 8192u);
  cuMemFreeHost_params f{host};
  c = DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, &f);
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->host && c->frees);
}

TEST(MemoryCallTest, VmmCallsMapToPhysicalAndMappingRecords) {
  CUmemGenericAllocationHandle handle = 77;
  CUmemAllocationProp prop{};
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 3;
  cuMemCreate_params create{&handle, 2 << 20, &prop, 0};
  auto c = DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemCreate, &create);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->addr, 77u);
  EXPECT_TRUE(c->handle);
  EXPECT_EQ(c->device, 3);
  cuMemRelease_params release{handle};
  c = DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemRelease, &release);
  ASSERT_TRUE(c.has_value());
  EXPECT_TRUE(c->handle && c->frees);
  EXPECT_EQ(c->addr, 77u);
  cuMemMap_params map{0x200000, 2 << 20, 0, handle, 0};
  c = DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemMap, &map);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->type, RecordType::kMap);
  EXPECT_EQ(c->size, 2u << 20);
  EXPECT_FALSE(c->handle) << "a mapping is keyed by its address";
  cuMemUnmap_params unmap{0x200000, 2 << 20};
  c = DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, &unmap);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->type, RecordType::kUnmap);
}

TEST(MemoryCallTest, PitchAllocationsCountPitchTimesHeight) {
  CUdeviceptr ptr = 0x1000;
  size_t pitch = 1024;
  cuMemAllocPitch_v2_params p{&ptr, &pitch, 1000, 10, 4};
  auto c = DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2, &p);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->size, 10240u);
}

TEST(MemoryCallTest, EverySubscribedMemoryIdDecodes) {
  // Parameter blocks large enough for any of these calls, with null output pointers:
  // decoding must not crash, and every memory id must be known.
  alignas(16) unsigned char zeros[256] = {};
  std::size_t n = 0;
  const CUpti_CallbackId* ids = DriverCallbackIds(&n);
  std::set<CUpti_CallbackId> not_memory = {CUPTI_DRIVER_TRACE_CBID_cuInit,
                                           CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRetain};
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(DecodeDriverCall(ids[i], zeros).has_value(), !not_memory.count(ids[i]))
        << "driver cbid " << ids[i];
  }
  ids = RuntimeCallbackIds(&n);
  EXPECT_GE(n, 13u);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(DecodeRuntimeCall(ids[i], zeros).has_value()) << "runtime cbid " << ids[i];
  }
  EXPECT_FALSE(DecodeDriverCall(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, zeros).has_value());
}

// A failed device-memory call is recorded under its MemoryApi: every call that takes
// device memory must have one, or its failure would read as "unknown".
TEST(MemoryCallTest, EveryDeviceMemoryCallHasAFailedCallName) {
  alignas(16) unsigned char zeros[256] = {};
  std::size_t n = 0;
  const CUpti_CallbackId* ids = DriverCallbackIds(&n);
  for (std::size_t i = 0; i < n; ++i) {
    std::optional<MemoryCall> c = DecodeDriverCall(ids[i], zeros);
    if (!c || !TakesDeviceMemory(*c)) continue;
    EXPECT_NE(format::MemoryApiOf(c->api), format::MemoryApi::kUnknown) << c->api;
    EXPECT_FALSE(format::IsRuntimeApi(format::MemoryApiOf(c->api))) << c->api;
  }
  ids = RuntimeCallbackIds(&n);
  for (std::size_t i = 0; i < n; ++i) {
    std::optional<MemoryCall> c = DecodeRuntimeCall(ids[i], zeros);
    if (!c || !TakesDeviceMemory(*c)) continue;
    EXPECT_TRUE(format::IsRuntimeApi(format::MemoryApiOf(c->api))) << c->api;
  }
}

TEST(CuptiTraceNameTest, DerivesFromGpumemTrace) {
  EXPECT_EQ(CuptiTracePattern("/x/c.gpumem", "run.gpumem"), "/x/c.gpumem");
  EXPECT_EQ(CuptiTracePattern(nullptr, "run-%r.gpumem"), "run-%r.cupti.gpumem");
  EXPECT_EQ(CuptiTracePattern("", "trace"), "trace.cupti.gpumem");
  EXPECT_EQ(CuptiTracePattern(nullptr, nullptr), "gpumem-cupti-%p.gpumem");
}

}  // namespace
}  // namespace gpumem::cupti
