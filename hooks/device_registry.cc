#include "hooks/device_registry.h"

#include <array>
#include <atomic>
#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "allocator/caching_allocator.h"
#include "allocator/page_size.h"
#include "hooks/trace_hook.h"

namespace gpumem::hooks {
namespace {

struct Registry {
  std::mutex mu;  // guards starts, pending caps and the config
  std::optional<absl::StatusOr<Config>> config;
  std::optional<absl::StatusOr<AllocatorObserver*>> observer;
  std::atomic<DeviceState*> sole{nullptr};  // the only started device; null for 0 or 2+
  int started = 0;
  std::array<std::optional<absl::Status>, kMaxDevices> start_errors;
  std::array<std::optional<std::uint64_t>, kMaxDevices> pending_capacity;
  std::array<std::optional<double>, kMaxDevices> pending_fraction;
};

}  // namespace

constinit std::atomic<DeviceState*> g_started_devices[kMaxDevices] = {};

namespace {

Registry& R() {
  static Registry* registry = new Registry;  // never destroyed: see the header
  return *registry;
}

const absl::StatusOr<Config>& ConfigLocked(Registry& r) {
  if (!r.config) r.config = ParseConfigFromEnvironment();
  return *r.config;
}

// What set the cap a device starts with, for the trace.
format::CapacitySource CapacitySourceAtStart(const Registry& r, const Config& config, int device) {
  if (r.pending_capacity[device]) return format::CapacitySource::kSetCapacity;
  if (r.pending_fraction[device]) return format::CapacitySource::kMemoryFraction;
  if (config.capacity) return format::CapacitySource::kEnvironment;
  return format::CapacitySource::kDeviceTotal;
}

absl::StatusOr<DeviceState*> StartLocked(Registry& r, int device) {
  const absl::StatusOr<Config>& config = ConfigLocked(r);
  if (!config.ok()) return config.status();
  if (!r.observer) r.observer = StartTraceObserver(*config);
  if (!r.observer->ok()) return r.observer->status();

  absl::StatusOr<StartedBackend> backend = StartBackend(*config, device);
  if (!backend.ok()) return backend.status();
  auto state = std::make_unique<DeviceState>();
  state->device = device;
  state->backend = *std::move(backend);
  state->capacity = state->backend.backend->capacity();
  if (r.pending_fraction[device]) {
    state->capacity = static_cast<std::uint64_t>(*r.pending_fraction[device] *
                                                 state->backend.device_total_bytes);
  }
  if (r.pending_capacity[device]) state->capacity = *r.pending_capacity[device];
  state->backend.set_capacity(state->capacity);
  TraceCapacity(device, state->capacity, CapacitySourceAtStart(r, *config, device));
  const std::uint64_t headroom = HeadroomFor(*config, state->backend.name == "sim");
  // Unset (auto): a share of the device as capped at start (allocator/page_size.h).
  const Backend& started = *state->backend.backend;
  state->page_bytes =
      config->page_bytes != 0
          ? config->page_bytes
          : DefaultPageBytes(state->capacity, started.granularity(), started.supports_vmm());
  CachingAllocatorOptions options;
  options.device = device;
  options.observer = **r.observer;
  options.stitch = config->stitch;
  options.borrow = config->borrow;
  if (!config->medium_heap) options.medium_limit = 0;  // one heap a stream
  options.background_unmap = config->background_unmap;
  options.thread_cache = config->thread_cache;
  options.headroom_bytes = headroom;
  options.page_bytes = state->page_bytes;
  state->allocator = MakeCachingAllocator(*state->backend.backend, options);
  if (config->verbose) {
    std::fprintf(stderr,
                 "gpumem: device %d: %s backend, cap %.2f GiB of %.2f GiB, pages of %zu MiB\n",
                 device, state->backend.name.c_str(), state->capacity / 1073741824.0,
                 state->backend.device_total_bytes / 1073741824.0, state->page_bytes >> 20);
  }
  return state.release();
}

}  // namespace

const absl::StatusOr<Config>& ProcessConfig() {
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  return ConfigLocked(r);
}

absl::StatusOr<DeviceState*> GetDevice(int device) {
  if (device < 0 || device >= kMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat("device ", device, " is out of range"));
  }
  if (DeviceState* s = StartedDevice(device)) return s;
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  if (DeviceState* s = StartedDevice(device)) return s;
  if (r.start_errors[device]) return *r.start_errors[device];
  absl::StatusOr<DeviceState*> started = StartLocked(r, device);
  if (!started.ok()) {
    r.start_errors[device] = started.status();
    return started.status();
  }
  g_started_devices[device].store(*started, std::memory_order_release);
  r.sole.store(++r.started == 1 ? *started : nullptr, std::memory_order_release);
  return *started;
}

DeviceState* SoleStartedDevice() { return R().sole.load(std::memory_order_acquire); }

void ForEachStartedDevice(const std::function<void(DeviceState&)>& fn) {
  for (int d = 0; d < kMaxDevices; ++d) {
    if (DeviceState* s = StartedDevice(d)) fn(*s);
  }
}

void SetPendingCapacity(int device, std::uint64_t bytes) {
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  r.pending_capacity[device] = bytes;
  r.pending_fraction[device].reset();
}

void SetPendingFraction(int device, double fraction) {
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  r.pending_fraction[device] = fraction;
  r.pending_capacity[device].reset();
}

void ResetRegistryForTesting() {
  Registry& r = R();
  std::lock_guard<std::mutex> lock(r.mu);
  r.config.reset();
  r.observer.reset();
  r.sole.store(nullptr);
  r.started = 0;
  for (int d = 0; d < kMaxDevices; ++d) {
    delete g_started_devices[d].exchange(nullptr);  // tests hold no block across a reset
    r.start_errors[d].reset();
    r.pending_capacity[d].reset();
    r.pending_fraction[d].reset();
  }
}

}  // namespace gpumem::hooks
