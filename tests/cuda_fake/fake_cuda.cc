// A stand-in libcuda.so.1 for CPU machines: the driver calls gpumem makes, with the
// bookkeeping of virtual memory management (address reservations, physical handles,
// mappings, access grants, events) in host memory and no device memory behind it. It lets
// CI run the CUDA backends' own code (contexts, batched access, error paths, the
// allocator's lending of pages) where there is no GPU. Misuse a real driver would accept
// but gpumem must never do (releasing a handle that is still mapped) is counted.
//
// Switches, read at each call: FAKE_CUDA_RANGE_ACCESS=0 refuses cuMemSetAccess over a run
// of several mappings; FAKE_CUDA_EVENTS_PENDING=1 keeps events from completing until a
// synchronize; FAKE_CUDA_MAP_US=N makes each cuMemMap take N microseconds, as a real
// driver's calls take time. fake_cuda_counters() reports what was called, and
// fake_cuda_access_devices() which devices a mapping grants access to. An exported handle
// is a memfd holding the handle's number, so export and import work within one process;
// FAKE_CUDA_NO_EXPORT=1 refuses to create exportable pages, as some drivers do.
#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <sys/mman.h>
#include <unistd.h>

#include "tests/cuda_fake/fake_cuda.h"

namespace {

constexpr std::size_t kGranularity = std::size_t{2} << 20;
constexpr std::size_t kDeviceBytes = std::size_t{80} << 30;
// A second device, known only as a peer to grant access to (the context is device 0's).
constexpr int kPeerDevice = 1;

struct Mapping {
  std::size_t bytes;
  CUmemGenericAllocationHandle handle;
};

struct State {
  std::mutex mu;
  CUdeviceptr next_va = CUdeviceptr{1} << 40;
  std::map<CUdeviceptr, std::size_t> reserved;         // base -> bytes
  std::map<CUmemGenericAllocationHandle, int> handles;  // -> mappings
  // References taken by retain and import, each given back by a cuMemRelease.
  std::map<CUmemGenericAllocationHandle, int> extra_refs;
  CUmemGenericAllocationHandle next_handle = 1;
  std::map<CUdeviceptr, Mapping> mappings;
  std::map<CUdeviceptr, std::set<int>> accessible;  // page starts -> devices granted
  std::uintptr_t next_event = 1;
  std::map<std::uintptr_t, std::uint64_t> events;  // -> the synchronize count when recorded
  std::uint64_t synchronizes = 0;
};

State& S() {
  static State* s = new State();
  return *s;
}

bool Env(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}

thread_local CUcontext t_current = nullptr;
CUcontext const kContext = reinterpret_cast<CUcontext>(std::uintptr_t{0x1000});

FakeCudaCounters& Counters() {  // guarded by S().mu
  static FakeCudaCounters c{};
  return c;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) FakeCudaCounters fake_cuda_counters() {
  State& s = S();
  std::lock_guard lock(s.mu);
  FakeCudaCounters c = Counters();
  c.synchronizes = s.synchronizes;
  c.live_mappings = s.mappings.size();
  c.live_handles = s.handles.size();
  c.handles_mapped_twice = 0;
  for (const auto& [handle, mappings] : s.handles) c.handles_mapped_twice += mappings > 1;
  return c;
}

extern "C" __attribute__((visibility("default"))) unsigned fake_cuda_access_devices(
    CUdeviceptr page) {
  State& s = S();
  std::lock_guard lock(s.mu);
  unsigned mask = 0;
  if (auto it = s.accessible.find(page); it != s.accessible.end()) {
    for (int device : it->second) mask |= 1u << device;
  }
  return mask;
}

extern "C" {

CUresult CUDAAPI cuInit(unsigned int) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuGetErrorName(CUresult, const char** name) {
  *name = "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  if (ordinal != 0 && ordinal != kPeerDevice) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetCount(int* count) {
  *count = 1;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute, CUdevice) {
  *value = 1;  // every attribute asked for (VMM support) is there
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice) {
  *ctx = kContext;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxGetCurrent(CUcontext* ctx) {
  *ctx = t_current;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  t_current = ctx;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuCtxSynchronize(void) {
  std::lock_guard lock(S().mu);
  ++S().synchronizes;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemGetInfo(size_t* free_bytes, size_t* total) {
  *free_bytes = *total = kDeviceBytes;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemAlloc(CUdeviceptr* ptr, size_t bytes) {
  std::lock_guard lock(S().mu);
  *ptr = S().next_va;
  S().next_va += (bytes + kGranularity) / kGranularity * kGranularity;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity,
                                               const CUmemAllocationProp*,
                                               CUmemAllocationGranularity_flags) {
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t bytes, size_t, CUdeviceptr,
                                     unsigned long long) {
  if (bytes == 0 || bytes % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard lock(s.mu);
  *ptr = s.next_va;
  s.reserved[*ptr] = bytes;
  s.next_va += bytes + kGranularity;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t bytes) {
  State& s = S();
  std::lock_guard lock(s.mu);
  auto it = s.reserved.find(ptr);
  if (it == s.reserved.end() || it->second != bytes) return CUDA_ERROR_INVALID_VALUE;
  auto m = s.mappings.lower_bound(ptr);
  if (m != s.mappings.end() && m->first < ptr + bytes) return CUDA_ERROR_INVALID_VALUE;
  s.reserved.erase(it);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t bytes,
                             const CUmemAllocationProp* prop, unsigned long long) {
  if (bytes == 0 || bytes % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE && Env("FAKE_CUDA_NO_EXPORT", "1")) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  State& s = S();
  std::lock_guard lock(s.mu);
  *handle = s.next_handle++;
  s.handles[*handle] = 0;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  State& s = S();
  std::lock_guard lock(s.mu);
  auto it = s.handles.find(handle);
  if (it == s.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  if (auto extra = s.extra_refs.find(handle); extra != s.extra_refs.end()) {
    if (--extra->second == 0) s.extra_refs.erase(extra);
    return CUDA_SUCCESS;
  }
  // A real driver frees the memory at the last unmap; gpumem should never rely on it.
  if (it->second != 0) ++Counters().released_while_mapped;
  s.handles.erase(it);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t bytes, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long) {
  if (const char* us = std::getenv("FAKE_CUDA_MAP_US")) {
    std::this_thread::sleep_for(std::chrono::microseconds(std::atoi(us)));
  }
  State& s = S();
  std::lock_guard lock(s.mu);
  if (offset != 0 || bytes != kGranularity || !s.handles.contains(handle)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto r = s.reserved.upper_bound(ptr);
  if (r == s.reserved.begin() || std::prev(r)->first + std::prev(r)->second < ptr + bytes) {
    return CUDA_ERROR_INVALID_VALUE;  // outside any reservation
  }
  auto next = s.mappings.lower_bound(ptr);
  if (next != s.mappings.end() && next->first < ptr + bytes) return CUDA_ERROR_INVALID_VALUE;
  if (next != s.mappings.begin() && std::prev(next)->first + std::prev(next)->second.bytes > ptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  s.mappings[ptr] = {bytes, handle};
  ++s.handles[handle];
  ++Counters().maps;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t bytes) {
  if (Env("FAKE_CUDA_SHUT_DOWN", "1")) return CUDA_ERROR_DEINITIALIZED;
  State& s = S();
  std::lock_guard lock(s.mu);
  auto it = s.mappings.find(ptr);
  if (it == s.mappings.end() || it->second.bytes != bytes) return CUDA_ERROR_INVALID_VALUE;
  --s.handles[it->second.handle];
  for (CUdeviceptr at = ptr; at < ptr + bytes; at += kGranularity) s.accessible.erase(at);
  s.mappings.erase(it);
  ++Counters().unmaps;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t bytes, const CUmemAccessDesc* desc,
                                size_t count) {
  State& s = S();
  std::lock_guard lock(s.mu);
  if (count == 0 || desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Every byte of the range must be mapped, mapping after mapping.
  std::size_t runs = 0;
  CUdeviceptr at = ptr;
  while (at < ptr + bytes) {
    auto it = s.mappings.find(at);
    if (it == s.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    at += it->second.bytes;
    ++runs;
  }
  if (at != ptr + bytes) return CUDA_ERROR_INVALID_VALUE;
  if (runs > 1 && Env("FAKE_CUDA_RANGE_ACCESS", "0")) return CUDA_ERROR_INVALID_VALUE;
  for (at = ptr; at < ptr + bytes; at += kGranularity) {
    for (std::size_t i = 0; i < count; ++i) s.accessible[at].insert(desc[i].location.id);
  }
  ++Counters().set_access_calls;
  Counters().set_access_pages += runs;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventCreate(CUevent* event, unsigned int) {
  State& s = S();
  std::lock_guard lock(s.mu);
  const std::uintptr_t id = s.next_event++;
  s.events[id] = 0;
  *event = reinterpret_cast<CUevent>(id);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventRecord(CUevent event, CUstream) {
  State& s = S();
  std::lock_guard lock(s.mu);
  s.events[reinterpret_cast<std::uintptr_t>(event)] = s.synchronizes;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventQuery(CUevent event) {
  if (Env("FAKE_CUDA_SHUT_DOWN", "1")) return CUDA_ERROR_DEINITIALIZED;
  State& s = S();
  std::lock_guard lock(s.mu);
  if (!Env("FAKE_CUDA_EVENTS_PENDING", "1")) return CUDA_SUCCESS;
  return s.events[reinterpret_cast<std::uintptr_t>(event)] < s.synchronizes
             ? CUDA_SUCCESS
             : CUDA_ERROR_NOT_READY;
}
CUresult CUDAAPI cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
// One device that runs nothing: a wait only has to name a live event.
CUresult CUDAAPI cuStreamWaitEvent(CUstream, CUevent event, unsigned int flags) {
  State& s = S();
  std::lock_guard lock(s.mu);
  if (flags != 0 || !s.events.contains(reinterpret_cast<std::uintptr_t>(event))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ++Counters().stream_waits;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy(CUevent event) {
  State& s = S();
  std::lock_guard lock(s.mu);
  s.events.erase(reinterpret_cast<std::uintptr_t>(event));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuPointerGetAttribute(void*, CUpointer_attribute, CUdeviceptr) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int) {
  *stream = nullptr;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr, unsigned int, size_t, CUstream) {
  return CUDA_ERROR_NOT_SUPPORTED;  // no device memory behind the addresses
}
CUresult CUDAAPI cuMemcpyDtoH(void*, CUdeviceptr, size_t) { return CUDA_ERROR_NOT_SUPPORTED; }
CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  State& s = S();
  std::lock_guard lock(s.mu);
  const CUdeviceptr at = reinterpret_cast<CUdeviceptr>(addr);
  auto it = s.mappings.upper_bound(at);
  if (it == s.mappings.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (it->first + it->second.bytes <= at) return CUDA_ERROR_INVALID_VALUE;
  *handle = it->second.handle;
  ++s.extra_refs[*handle];
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType type, unsigned long long) {
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard lock(s.mu);
  if (!s.handles.contains(handle)) return CUDA_ERROR_INVALID_VALUE;
  const int fd = memfd_create("fake-cuda-handle", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
  if (pwrite(fd, &handle, sizeof handle, 0) != static_cast<ssize_t>(sizeof handle)) {
    close(fd);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  *static_cast<int*>(shareable) = fd;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                void* os_handle, CUmemAllocationHandleType type) {
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  const int fd = static_cast<int>(reinterpret_cast<std::intptr_t>(os_handle));
  CUmemGenericAllocationHandle id = 0;
  if (pread(fd, &id, sizeof id, 0) != static_cast<ssize_t>(sizeof id)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  State& s = S();
  std::lock_guard lock(s.mu);
  if (!s.handles.contains(id)) return CUDA_ERROR_INVALID_HANDLE;
  ++s.extra_refs[id];
  *handle = id;
  return CUDA_SUCCESS;
}

}  // extern "C"
