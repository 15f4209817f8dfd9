// cupti.h (through memory_call.h) brings the callback ids and the parameter structs;
// those generated headers have no include guards, so they are not included again here.
#include "profiler/cupti/memory_call.h"


namespace gpumem::cupti {
namespace {

using format::RecordType;

constexpr CUpti_CallbackId kDriverIds[] = {
    CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged,
    CUPTI_DRIVER_TRACE_CBID_cuMemCreate,
    CUPTI_DRIVER_TRACE_CBID_cuMemRelease,
    CUPTI_DRIVER_TRACE_CBID_cuMemMap,
    CUPTI_DRIVER_TRACE_CBID_cuMemUnmap,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
    // Not memory calls: the first CUDA calls of a process, to notice a forked child.
    CUPTI_DRIVER_TRACE_CBID_cuInit,
    CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxRetain,
};

constexpr CUpti_CallbackId kRuntimeIds[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020,
};

std::uint64_t Ptr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
template <typename T>
std::uint64_t Out(T* p) {  // an output parameter, 0 if the caller passed none
  return p == nullptr ? 0 : static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(*p));
}
std::uint64_t OutDev(const CUdeviceptr* p) { return p == nullptr ? 0 : *p; }

MemoryCall Alloc(const char* api, std::uint64_t addr, std::uint64_t size,
                 std::uint64_t stream = 0, bool host = false) {
  MemoryCall c;
  c.type = RecordType::kSegmentAlloc;
  c.api = api;
  c.addr = addr;
  c.size = size;
  c.stream = stream;
  c.host = host;
  return c;
}

MemoryCall StreamOrdered(MemoryCall c) {
  c.stream_ordered = true;
  return c;
}

MemoryCall Free(const char* api, std::uint64_t addr, std::uint64_t stream = 0,
                bool host = false) {
  MemoryCall c;
  c.type = RecordType::kSegmentFree;
  c.api = api;
  c.addr = addr;
  c.stream = stream;
  c.host = host;
  c.frees = true;
  return c;
}

// Decoders, one per shape of parameter block (the field names CUPTI's headers give).
template <typename P>
MemoryCall DeviceAlloc(const char* api, const void* v) {
  auto* p = static_cast<const P*>(v);
  return Alloc(api, OutDev(p->dptr), p->bytesize);
}
template <typename P>
MemoryCall PitchAlloc(const char* api, const void* v) {
  auto* p = static_cast<const P*>(v);
  const std::uint64_t pitch = p->pPitch == nullptr ? p->WidthInBytes : *p->pPitch;
  return Alloc(api, OutDev(p->dptr), pitch * p->Height);
}
template <typename P>
MemoryCall DeviceFree(const char* api, const void* v) {
  return Free(api, static_cast<const P*>(v)->dptr);
}
template <typename P>
MemoryCall HostAlloc(const char* api, const void* v) {
  auto* p = static_cast<const P*>(v);
  return Alloc(api, Out(p->pp), p->bytesize, 0, true);
}
template <typename P>
MemoryCall HostFree(const char* api, const void* v) {
  return Free(api, Ptr(static_cast<const P*>(v)->p), 0, true);
}
template <typename P>
MemoryCall HandleCreate(const char* api, const void* v) {
  auto* p = static_cast<const P*>(v);
  MemoryCall c = Alloc(api, p->handle == nullptr ? 0 : *p->handle, p->size);
  c.handle = true;
  if (p->prop != nullptr && p->prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    c.device = p->prop->location.id;
  }
  return c;
}
template <typename P>
MemoryCall HandleRelease(const char* api, const void* v) {
  MemoryCall c = Free(api, static_cast<const P*>(v)->handle);
  c.handle = true;
  return c;
}
template <typename P>
MemoryCall Mapping(const char* api, const void* v, RecordType type) {
  auto* p = static_cast<const P*>(v);
  MemoryCall c = Alloc(api, p->ptr, p->size);
  c.type = type;
  return c;
}
template <typename P>
MemoryCall Map(const char* api, const void* v) {
  return Mapping<P>(api, v, RecordType::kMap);
}
template <typename P>
MemoryCall Unmap(const char* api, const void* v) {
  return Mapping<P>(api, v, RecordType::kUnmap);
}
template <typename P>
MemoryCall StreamAlloc(const char* api, const void* v) {
  auto* p = static_cast<const P*>(v);
  return StreamOrdered(Alloc(api, OutDev(p->dptr), p->bytesize, Ptr(p->hStream)));
}
template <typename P>
MemoryCall StreamFree(const char* api, const void* v) {
  auto* p = static_cast<const P*>(v);
  return StreamOrdered(Free(api, p->dptr, Ptr(p->hStream)));
}

template <typename P>
MemoryCall RuntimeAlloc(const char* api, const void* v) {
  auto* p = static_cast<const P*>(v);
  return Alloc(api, Out(p->devPtr), p->size);
}
template <typename P>
MemoryCall RuntimePitchAlloc(const char* api, const void* v) {
  auto* p = static_cast<const P*>(v);
  const std::uint64_t pitch = p->pitch == nullptr ? p->width : *p->pitch;
  return Alloc(api, Out(p->devPtr), pitch * p->height);
}
template <typename P>
MemoryCall RuntimeFree(const char* api, const void* v) {
  return Free(api, Ptr(static_cast<const P*>(v)->devPtr));
}
template <typename P>
MemoryCall RuntimeHostAlloc(const char* api, const void* v) {
  auto* p = static_cast<const P*>(v);
  if constexpr (requires { p->pHost; }) {
    return Alloc(api, Out(p->pHost), p->size, 0, true);
  } else {
    return Alloc(api, Out(p->ptr), p->size, 0, true);
  }
}
template <typename P>
MemoryCall RuntimeHostFree(const char* api, const void* v) {
  return Free(api, Ptr(static_cast<const P*>(v)->ptr), 0, true);
}
template <typename P>
MemoryCall RuntimeStreamAlloc(const char* api, const void* v) {
  auto* p = static_cast<const P*>(v);
  return StreamOrdered(Alloc(api, Out(p->devPtr), p->size, Ptr(p->hStream)));
}
template <typename P>
MemoryCall RuntimeStreamFree(const char* api, const void* v) {
  auto* p = static_cast<const P*>(v);
  return StreamOrdered(Free(api, Ptr(p->devPtr), Ptr(p->hStream)));
}
template <typename P>
MemoryCall RuntimePoolAlloc(const char* api, const void* v) {
  auto* p = static_cast<const P*>(v);
  return StreamOrdered(Alloc(api, Out(p->ptr), p->size, Ptr(p->stream)));
}

}  // namespace

const CUpti_CallbackId* DriverCallbackIds(std::size_t* n) {
  *n = sizeof(kDriverIds) / sizeof(kDriverIds[0]);
  return kDriverIds;
}

const CUpti_CallbackId* RuntimeCallbackIds(std::size_t* n) {
  *n = sizeof(kRuntimeIds) / sizeof(kRuntimeIds[0]);
  return kRuntimeIds;
}

std::optional<MemoryCall> DecodeDriverCall(CUpti_CallbackId cbid, const void* params) {
// One case per call: its parameter block read by the decoder for its shape, its name the
// callback id's.
#define GPUMEM_DRIVER_CALL(name, decode) \
  case CUPTI_DRIVER_TRACE_CBID_##name:   \
    return decode<name##_params>(#name, params)
  switch (cbid) {
    GPUMEM_DRIVER_CALL(cuMemAlloc_v2, DeviceAlloc);
    GPUMEM_DRIVER_CALL(cuMemAllocManaged, DeviceAlloc);
    GPUMEM_DRIVER_CALL(cuMemAllocPitch_v2, PitchAlloc);
    GPUMEM_DRIVER_CALL(cuMemFree_v2, DeviceFree);
    GPUMEM_DRIVER_CALL(cuMemAllocHost_v2, HostAlloc);
    GPUMEM_DRIVER_CALL(cuMemHostAlloc, HostAlloc);
    GPUMEM_DRIVER_CALL(cuMemFreeHost, HostFree);
    GPUMEM_DRIVER_CALL(cuMemCreate, HandleCreate);
    GPUMEM_DRIVER_CALL(cuMemRelease, HandleRelease);
    GPUMEM_DRIVER_CALL(cuMemMap, Map);
    GPUMEM_DRIVER_CALL(cuMemUnmap, Unmap);
    GPUMEM_DRIVER_CALL(cuMemAllocAsync, StreamAlloc);
    GPUMEM_DRIVER_CALL(cuMemAllocAsync_ptsz, StreamAlloc);
    GPUMEM_DRIVER_CALL(cuMemFreeAsync, StreamFree);
    GPUMEM_DRIVER_CALL(cuMemFreeAsync_ptsz, StreamFree);
    GPUMEM_DRIVER_CALL(cuMemAllocFromPoolAsync, StreamAlloc);
    GPUMEM_DRIVER_CALL(cuMemAllocFromPoolAsync_ptsz, StreamAlloc);
    default:
      return std::nullopt;
  }
#undef GPUMEM_DRIVER_CALL
}

std::optional<MemoryCall> DecodeRuntimeCall(CUpti_CallbackId cbid, const void* params) {
// As above; the name drops the id's version suffix (cudaMalloc_v3020: "cudaMalloc").
#define GPUMEM_RUNTIME_CALL(name, version, decode)    \
  case CUPTI_RUNTIME_TRACE_CBID_##name##version:      \
    c = decode<name##version##_params>(#name, params); \
    break
  std::optional<MemoryCall> c;
  switch (cbid) {
    GPUMEM_RUNTIME_CALL(cudaMalloc, _v3020, RuntimeAlloc);
    GPUMEM_RUNTIME_CALL(cudaMallocManaged, _v6000, RuntimeAlloc);
    GPUMEM_RUNTIME_CALL(cudaMallocPitch, _v3020, RuntimePitchAlloc);
    GPUMEM_RUNTIME_CALL(cudaFree, _v3020, RuntimeFree);
    GPUMEM_RUNTIME_CALL(cudaMallocHost, _v3020, RuntimeHostAlloc);
    GPUMEM_RUNTIME_CALL(cudaHostAlloc, _v3020, RuntimeHostAlloc);
    GPUMEM_RUNTIME_CALL(cudaFreeHost, _v3020, RuntimeHostFree);
    GPUMEM_RUNTIME_CALL(cudaMallocAsync, _v11020, RuntimeStreamAlloc);
    GPUMEM_RUNTIME_CALL(cudaMallocAsync_ptsz, _v11020, RuntimeStreamAlloc);
    GPUMEM_RUNTIME_CALL(cudaFreeAsync, _v11020, RuntimeStreamFree);
    GPUMEM_RUNTIME_CALL(cudaFreeAsync_ptsz, _v11020, RuntimeStreamFree);
    GPUMEM_RUNTIME_CALL(cudaMallocFromPoolAsync, _v11020, RuntimePoolAlloc);
    GPUMEM_RUNTIME_CALL(cudaMallocFromPoolAsync_ptsz, _v11020, RuntimePoolAlloc);
    default:
      break;
  }
#undef GPUMEM_RUNTIME_CALL
  if (c) c->runtime = true;
  return c;
}

}  // namespace gpumem::cupti
