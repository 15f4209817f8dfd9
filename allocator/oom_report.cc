#include "allocator/device_allocator.h"

#include "absl/strings/str_format.h"

namespace gpumem {

std::string OomReport::ToString() const {
  constexpr double kMiB = 1024.0 * 1024.0;
  return absl::StrFormat(
      "out of memory: requested %.2f MiB; %.2f MiB allocated, %.2f MiB reserved, largest free "
      "piece %.2f MiB, capacity %.2f MiB",
      requested_bytes / kMiB, allocated_bytes / kMiB, reserved_bytes / kMiB,
      largest_free_bytes / kMiB, capacity_bytes / kMiB) + PoolsNote() + HeadroomNote();
}

std::string OomReport::PoolsNote() const {
  if (other_pools_free_bytes == 0) return "";
  return absl::StrFormat(
      "; %.2f MiB of the reserved memory is free inside private pools (CUDA graphs or "
      "torch.cuda.MemPool still alive), which only allocations into those pools can use",
      other_pools_free_bytes / (1024.0 * 1024.0));
}

std::string OomReport::HeadroomNote() const {
  if (headroom_bytes == 0) return "";
  return absl::StrFormat(
      "; refused to take the driver below the %.0f MiB kept free for cuBLAS, cuDNN, NCCL "
      "and other libraries (GPUMEM_HEADROOM; 0 lets gpumem use it)",
      headroom_bytes / (1024.0 * 1024.0));
}

}  // namespace gpumem
