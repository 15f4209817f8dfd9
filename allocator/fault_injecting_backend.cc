#include "allocator/fault_injecting_backend.h"

#include "absl/strings/str_cat.h"

namespace gpumem {
namespace {

// Not ResourceExhausted: the allocator must cope with any error code a driver returns.
absl::Status Injected(const char* call) {
  return absl::UnavailableError(absl::StrCat("injected fault: ", call));
}

}  // namespace

FaultInjectingBackend::FaultInjectingBackend(Backend& inner, std::uint64_t seed,
                                             FaultRates rates)
    : inner_(inner), rng_(seed), rates_(rates) {}

void FaultInjectingBackend::set_rates(const FaultRates& rates) {
  std::lock_guard lock(mu_);
  rates_ = rates;
}

FaultCounts FaultInjectingBackend::injected() const {
  std::lock_guard lock(mu_);
  return injected_;
}

bool FaultInjectingBackend::Fail(double FaultRates::*rate, std::uint64_t FaultCounts::*count) {
  std::lock_guard lock(mu_);
  const double p = rates_.*rate;
  if (p <= 0) return false;  // draws nothing: a run without faults stays as it was
  if (std::uniform_real_distribution<double>(0, 1)(rng_) >= p) return false;
  ++(injected_.*count);
  return true;
}

std::size_t FaultInjectingBackend::Below(std::size_t n) {
  std::lock_guard lock(mu_);
  return static_cast<std::size_t>(rng_() % n);
}

absl::StatusOr<DevicePtr> FaultInjectingBackend::ReserveAddressRange(std::size_t bytes) {
  if (Fail(&FaultRates::reserve, &FaultCounts::reserve)) return Injected("ReserveAddressRange");
  return inner_.ReserveAddressRange(bytes);
}

absl::StatusOr<PhysicalHandle> FaultInjectingBackend::CreatePhysical(std::size_t bytes) {
  if (Fail(&FaultRates::create, &FaultCounts::create)) return Injected("CreatePhysical");
  return inner_.CreatePhysical(bytes);
}

absl::Status FaultInjectingBackend::Map(DevicePtr va, std::size_t bytes, PhysicalHandle handle,
                                        std::size_t offset) {
  if (Fail(&FaultRates::map, &FaultCounts::map)) return Injected("Map");
  return inner_.Map(va, bytes, handle, offset);
}

// A failure part way, as when the driver refuses one page's access grant: the pages
// before it were mapped and are unmapped again (by the device, whose undo is not
// faulted: MapPages is all or nothing).
absl::Status FaultInjectingBackend::MapPages(DevicePtr va, std::size_t page_bytes,
                                             const PhysicalHandle* handles, std::size_t n) {
  if (n == 0 || !Fail(&FaultRates::map, &FaultCounts::map)) {
    return inner_.MapPages(va, page_bytes, handles, n);
  }
  const std::size_t mapped = Below(n);
  if (mapped > 0 && inner_.MapPages(va, page_bytes, handles, mapped).ok()) {
    for (std::size_t i = 0; i < mapped; ++i) {
      inner_.Unmap(va + i * page_bytes, page_bytes).IgnoreError();
    }
  }
  return Injected("MapPages");
}

absl::Status FaultInjectingBackend::Unmap(DevicePtr va, std::size_t bytes) {
  if (Fail(&FaultRates::unmap, &FaultCounts::unmap)) return Injected("Unmap");
  return inner_.Unmap(va, bytes);
}

absl::StatusOr<DevicePtr> FaultInjectingBackend::AllocateSegment(std::size_t bytes) {
  if (Fail(&FaultRates::segment, &FaultCounts::segment)) return Injected("AllocateSegment");
  return inner_.AllocateSegment(bytes);
}

absl::Status FaultInjectingBackend::StreamWaitEvent(StreamId waiter, EventHandle event) {
  if (Fail(&FaultRates::stream_wait, &FaultCounts::stream_wait)) {
    return Injected("StreamWaitEvent");
  }
  return inner_.StreamWaitEvent(waiter, event);
}

bool FaultInjectingBackend::EventCompleted(EventHandle event) {
  if (Fail(&FaultRates::event_query, &FaultCounts::event_query)) return false;
  return inner_.EventCompleted(event);
}

}  // namespace gpumem
