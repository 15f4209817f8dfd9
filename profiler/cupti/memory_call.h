// What one CUDA driver or runtime memory call did, read from its CUPTI callback
// parameters: kept apart from the CUPTI plumbing so it is tested on machines without a GPU.
#pragma once

#include <cstdint>
#include <optional>

#include <cupti.h>

#include "profiler/trace_format.h"

namespace gpumem::cupti {

struct MemoryCall {
  format::RecordType type = format::RecordType::kSegmentAlloc;
  const char* api = "";       // the call's name, e.g. "cuMemAlloc_v2", "cudaMalloc"
  bool runtime = false;       // a cuda* (runtime) call rather than a cu* (driver) one
  bool host = false;          // pinned host memory: device -1
  bool frees = false;         // size must come from the matching allocation
  bool handle = false;        // addr is a cuMemCreate allocation handle, not an address
  bool stream_ordered = false;  // cuMemAllocAsync, cudaMallocAsync, ... and their frees
  std::uint64_t addr = 0;     // for cuMemCreate / cuMemRelease: the allocation handle
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::optional<int> device;  // where the parameters say (cuMemCreate's location)
};

// Whether the call asks for device memory (cuMemAlloc*, cuMemCreate, cudaMalloc*, ...):
// when one fails, gpumem's allocator is asked to give idle memory back.
inline bool TakesDeviceMemory(const MemoryCall& call) {
  return call.type == format::RecordType::kSegmentAlloc && !call.host;
}

// Whether the call is recorded with its native frames whatever GPUMEM_STACKS asks (but
// none): a device allocation that is not stream-ordered. These are few (NCCL's buffers,
// cuBLAS and cuDNN workspaces, an allocator's segments), and their native caller names the
// library that holds the memory; stream-ordered ones can come one per tensor (PyTorch's
// cudaMallocAsync backend), where unwinding each would cost the run.
inline bool NamesItsLibrary(const MemoryCall& call) {
  return TakesDeviceMemory(call) && !call.stream_ordered;
}

// Every callback id the tracer subscribes to, per domain.
const CUpti_CallbackId* DriverCallbackIds(std::size_t* n);
const CUpti_CallbackId* RuntimeCallbackIds(std::size_t* n);

// The call, read at the callback's exit (output pointers filled in); nullopt for a
// callback id that is not a memory call.
std::optional<MemoryCall> DecodeDriverCall(CUpti_CallbackId cbid, const void* params);
std::optional<MemoryCall> DecodeRuntimeCall(CUpti_CallbackId cbid, const void* params);

}  // namespace gpumem::cupti
