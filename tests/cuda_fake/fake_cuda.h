// What the stand-in libcuda.so.1 (fake_cuda.cc) reports to tests, found with dlsym.
#pragma once

#include <cstdint>

extern "C" {

struct FakeCudaCounters {
  std::uint64_t maps;
  std::uint64_t unmaps;
  std::uint64_t set_access_calls;
  std::uint64_t set_access_pages;       // mappings covered by those calls
  std::uint64_t synchronizes;           // cuCtxSynchronize
  std::uint64_t released_while_mapped;  // cuMemRelease of a handle still mapped somewhere
  std::uint64_t live_mappings;
  std::uint64_t live_handles;
  std::uint64_t handles_mapped_twice;   // handles mapped at two addresses right now
  std::uint64_t stream_waits;           // cuStreamWaitEvent
};

using FakeCudaCountersFn = FakeCudaCounters (*)();
// The devices (bit i: device i) with access to the mapping at `page`.
using FakeCudaAccessDevicesFn = unsigned (*)(unsigned long long page);

}  // extern "C"
