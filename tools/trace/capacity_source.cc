#include "tools/trace/trace.h"

namespace gpumem::trace {

const char* CapacitySourceName(CapacitySource source) {
  switch (source) {
    case CapacitySource::kUnknown: return "unknown";
    case CapacitySource::kDeviceTotal: return "device total";
    case CapacitySource::kEnvironment: return "GPUMEM_CAPACITY";
    case CapacitySource::kMemoryFraction: return "set_per_process_memory_fraction";
    case CapacitySource::kSetCapacity: return "gpumem.set_capacity";
  }
  return "unknown";
}

}  // namespace gpumem::trace
