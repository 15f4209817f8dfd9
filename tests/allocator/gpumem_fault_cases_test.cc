// Device failures the randomized fault check (gpumem_fault_model_check_test) does not
// reach: teardown of a released pool while the device refuses unmaps.
#include <gtest/gtest.h>

#include "allocator/caching_allocator.h"
#include "allocator/fault_injecting_backend.h"
#include "allocator/sim_backend.h"
#include "tests/allocator/test_units.h"

namespace gpumem {
namespace {

using namespace test_units;

constexpr PoolId kPool = 7;

// The pool's pages stay mapped and counted, its range kept; a later empty_cache, once
// the device agrees, returns all of it.
TEST(FaultCasesTest, APoolReleasedWhileUnmapsFailGoesAtALaterEmptyCache) {
  SimBackend sim;
  FaultInjectingBackend faults(sim, /*seed=*/1);
  auto alloc = MakeCachingAllocator(faults);
  DevicePtr a = *alloc->AllocateInPool(8 * kMiB, kS1, kPool);
  DevicePtr b = *alloc->AllocateInPool(3 * kMiB, kS1, kPool);
  alloc->Free(a);
  alloc->Free(b);
  faults.set_rates({.unmap = 1});
  alloc->ReleasePool(kPool);
  alloc->EmptyCache();
  EXPECT_GT(faults.injected().unmap, 0u);
  EXPECT_EQ(alloc->stats().reserved_bytes, sim.counters().physical_bytes);
  EXPECT_GT(sim.counters().reserved_va_bytes, 0u);
  faults.set_rates({});
  alloc->EmptyCache();
  EXPECT_EQ(alloc->stats().reserved_bytes, 0u);
  EXPECT_EQ(sim.counters().physical_bytes, 0u);
  EXPECT_EQ(sim.counters().mapped_bytes, 0u);
  EXPECT_EQ(sim.counters().reserved_va_bytes, 0u);
  // And the allocator serves the pool again.
  EXPECT_TRUE(alloc->AllocateInPool(8 * kMiB, kS1, kPool).ok());
}

}  // namespace
}  // namespace gpumem
