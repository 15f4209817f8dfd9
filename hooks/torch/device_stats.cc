// torch.cuda.memory_stats() and the functions built on it, from gpumem's own figures in
// PyTorch's keys: index 0 of each StatArray is every block, 1 the small pool (gpumem's
// size-class slabs), 2 the large pool.
#include <c10/util/Exception.h>

#include <cstddef>

#include "hooks/gpumem.h"
#include "hooks/torch/gpumem_allocator.h"

namespace gpumem::torch {
namespace {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingAllocator::StatArray;

void Copy(const gpumem_stat_t (&from)[3], StatArray& to) {
  for (std::size_t i = 0; i < 3; ++i) {
    to[i].current = from[i].current;
    to[i].peak = from[i].peak;
    to[i].allocated = from[i].allocated;
    to[i].freed = from[i].freed;
  }
}

}  // namespace

DeviceStats GpumemAllocator::getDeviceStats(c10::DeviceIndex device) {
  gpumem_detailed_stats_t s{};
  gpumem_detailed_stats(device, &s);  // a device that has not started: all zero
  DeviceStats out;
  Copy(s.allocation, out.allocation);
  Copy(s.segment, out.segment);
  Copy(s.active, out.active);
  Copy(s.allocated_bytes, out.allocated_bytes);
  Copy(s.reserved_bytes, out.reserved_bytes);
  Copy(s.active_bytes, out.active_bytes);
  Copy(s.requested_bytes, out.requested_bytes);
  // gpumem never keeps a split remainder it cannot lend: inactive_split stays 0.
  out.num_alloc_retries = s.num_alloc_retries;
  out.num_ooms = s.num_ooms;
  out.num_device_alloc = s.num_device_alloc;
  out.num_device_free = s.num_device_free;
  out.max_split_size = -1;  // no limit, as PyTorch reports it by default
  return out;
}

void GpumemAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  gpumem_reset_accumulated(device);
}

void GpumemAllocator::resetPeakStats(c10::DeviceIndex device) { gpumem_reset_peaks(device); }

}  // namespace gpumem::torch
