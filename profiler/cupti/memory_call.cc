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
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: {
      auto* p = static_cast<const cuMemAlloc_v2_params*>(params);
      return Alloc("cuMemAlloc_v2", OutDev(p->dptr), p->bytesize);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2: {
      auto* p = static_cast<const cuMemAllocPitch_v2_params*>(params);
      const std::uint64_t pitch = p->pPitch == nullptr ? p->WidthInBytes : *p->pPitch;
      return Alloc("cuMemAllocPitch_v2", OutDev(p->dptr), pitch * p->Height);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2: {
      auto* p = static_cast<const cuMemFree_v2_params*>(params);
      return Free("cuMemFree_v2", p->dptr);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2: {
      auto* p = static_cast<const cuMemAllocHost_v2_params*>(params);
      return Alloc("cuMemAllocHost_v2", Out(p->pp), p->bytesize, 0, true);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc: {
      auto* p = static_cast<const cuMemHostAlloc_params*>(params);
      return Alloc("cuMemHostAlloc", Out(p->pp), p->bytesize, 0, true);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost: {
      auto* p = static_cast<const cuMemFreeHost_params*>(params);
      return Free("cuMemFreeHost", Ptr(p->p), 0, true);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged: {
      auto* p = static_cast<const cuMemAllocManaged_params*>(params);
      return Alloc("cuMemAllocManaged", OutDev(p->dptr), p->bytesize);
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate: {
      auto* p = static_cast<const cuMemCreate_params*>(params);
      MemoryCall c = Alloc("cuMemCreate", p->handle == nullptr ? 0 : *p->handle, p->size);
      c.handle = true;
      if (p->prop != nullptr && p->prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
        c.device = p->prop->location.id;
      }
      return c;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemRelease: {
      auto* p = static_cast<const cuMemRelease_params*>(params);
      MemoryCall c = Free("cuMemRelease", p->handle);
      c.handle = true;
      return c;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap: {
      auto* p = static_cast<const cuMemMap_params*>(params);
      MemoryCall c = Alloc("cuMemMap", p->ptr, p->size);
      c.type = RecordType::kMap;
      return c;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap: {
      auto* p = static_cast<const cuMemUnmap_params*>(params);
      MemoryCall c = Alloc("cuMemUnmap", p->ptr, p->size);
      c.type = RecordType::kUnmap;
      return c;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync: {
      auto* p = static_cast<const cuMemAllocAsync_params*>(params);
      return Alloc("cuMemAllocAsync", OutDev(p->dptr), p->bytesize, Ptr(p->hStream));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz: {
      auto* p = static_cast<const cuMemAllocAsync_ptsz_params*>(params);
      return Alloc("cuMemAllocAsync_ptsz", OutDev(p->dptr), p->bytesize, Ptr(p->hStream));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync: {
      auto* p = static_cast<const cuMemFreeAsync_params*>(params);
      return Free("cuMemFreeAsync", p->dptr, Ptr(p->hStream));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz: {
      auto* p = static_cast<const cuMemFreeAsync_ptsz_params*>(params);
      return Free("cuMemFreeAsync_ptsz", p->dptr, Ptr(p->hStream));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync: {
      auto* p = static_cast<const cuMemAllocFromPoolAsync_params*>(params);
      return Alloc("cuMemAllocFromPoolAsync", OutDev(p->dptr), p->bytesize, Ptr(p->hStream));
    }
    case CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz: {
      auto* p = static_cast<const cuMemAllocFromPoolAsync_ptsz_params*>(params);
      return Alloc("cuMemAllocFromPoolAsync_ptsz", OutDev(p->dptr), p->bytesize,
                   Ptr(p->hStream));
    }
    default:
      return std::nullopt;
  }
}

std::optional<MemoryCall> DecodeRuntimeCall(CUpti_CallbackId cbid, const void* params) {
  std::optional<MemoryCall> c;
  switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020: {
      auto* p = static_cast<const cudaMalloc_v3020_params*>(params);
      c = Alloc("cudaMalloc", Out(p->devPtr), p->size);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020: {
      auto* p = static_cast<const cudaMallocPitch_v3020_params*>(params);
      const std::uint64_t pitch = p->pitch == nullptr ? p->width : *p->pitch;
      c = Alloc("cudaMallocPitch", Out(p->devPtr), pitch * p->height);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020: {
      auto* p = static_cast<const cudaFree_v3020_params*>(params);
      c = Free("cudaFree", Ptr(p->devPtr));
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020: {
      auto* p = static_cast<const cudaMallocHost_v3020_params*>(params);
      c = Alloc("cudaMallocHost", Out(p->ptr), p->size, 0, true);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020: {
      auto* p = static_cast<const cudaHostAlloc_v3020_params*>(params);
      c = Alloc("cudaHostAlloc", Out(p->pHost), p->size, 0, true);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020: {
      auto* p = static_cast<const cudaFreeHost_v3020_params*>(params);
      c = Free("cudaFreeHost", Ptr(p->ptr), 0, true);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000: {
      auto* p = static_cast<const cudaMallocManaged_v6000_params*>(params);
      c = Alloc("cudaMallocManaged", Out(p->devPtr), p->size);
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020: {
      auto* p = static_cast<const cudaMallocAsync_v11020_params*>(params);
      c = Alloc("cudaMallocAsync", Out(p->devPtr), p->size, Ptr(p->hStream));
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020: {
      auto* p = static_cast<const cudaMallocAsync_ptsz_v11020_params*>(params);
      c = Alloc("cudaMallocAsync_ptsz", Out(p->devPtr), p->size, Ptr(p->hStream));
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020: {
      auto* p = static_cast<const cudaFreeAsync_v11020_params*>(params);
      c = Free("cudaFreeAsync", Ptr(p->devPtr), Ptr(p->hStream));
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020: {
      auto* p = static_cast<const cudaFreeAsync_ptsz_v11020_params*>(params);
      c = Free("cudaFreeAsync_ptsz", Ptr(p->devPtr), Ptr(p->hStream));
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020: {
      auto* p = static_cast<const cudaMallocFromPoolAsync_v11020_params*>(params);
      c = Alloc("cudaMallocFromPoolAsync", Out(p->ptr), p->size, Ptr(p->stream));
      break;
    }
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020: {
      auto* p = static_cast<const cudaMallocFromPoolAsync_ptsz_v11020_params*>(params);
      c = Alloc("cudaMallocFromPoolAsync_ptsz", Out(p->ptr), p->size, Ptr(p->stream));
      break;
    }
    default:
      break;
  }
  if (c) c->runtime = true;
  return c;
}

}  // namespace gpumem::cupti
