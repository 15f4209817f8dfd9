// The cap an OOM tells of where no record holds one (capacity.h, CapFromOom).
#include "tools/report/capacity.h"

#include "gtest/gtest.h"

namespace gpumem::report {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;
constexpr std::uint64_t kGiB = kMiB << 10;

OomPoint Oom(std::uint64_t request, std::uint64_t reserved, std::uint64_t device_free) {
  OomPoint p;
  p.request = request;
  p.reserved = reserved;
  p.device_free = device_free;
  return p;
}

// set_per_process_memory_fraction(4 GiB) on a 140 GiB device: the driver had 130 GiB free
// when PyTorch refused; the cap is at least the most the process held.
TEST(CapFromOom, ADriverWithRoomLeftMeansACapOfTheProcesssOwn) {
  Timeline timeline;
  timeline.devices.resize(1);
  timeline.devices[0].reserved = 4 * kGiB - 8 * kMiB;  // before PyTorch emptied its cache
  const std::optional<KnownCapacity> cap = CapFromOom(Oom(8 * kMiB, 3 * kGiB, 130 * kGiB), timeline);
  ASSERT_TRUE(cap.has_value());
  EXPECT_EQ(cap->bytes, 4 * kGiB - 8 * kMiB);
  EXPECT_NE(cap->source.find("set_per_process_memory_fraction"), std::string::npos);
}

// The whole device filled: 17 MiB free, under the 20 MiB segment an 8 MiB tensor needs
// from PyTorch, or a little over it: no cap but the device's.
TEST(CapFromOom, ADeviceFilledToItsLastPagesTellsOfNoCap) {
  Timeline timeline;
  EXPECT_FALSE(CapFromOom(Oom(8 * kMiB, 139 * kGiB, 17 * kMiB), timeline).has_value());
  EXPECT_FALSE(CapFromOom(Oom(8 * kMiB, 139 * kGiB, 60 * kMiB), timeline).has_value());
  EXPECT_FALSE(CapFromOom(Oom(8 * kMiB, 0, 130 * kGiB), timeline).has_value());
}

}  // namespace
}  // namespace gpumem::report
