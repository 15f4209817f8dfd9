#include "hooks/backend_factory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "allocator/sim_backend.h"
#ifdef GPUMEM_HAVE_CUDA
#include "allocator/cuda_vmm_backend.h"
#endif

namespace gpumem::hooks {
namespace {

std::uint64_t CapFor(const Config& config, std::uint64_t total) {
  std::uint64_t cap = total;
  if (config.capacity) cap = std::min(cap, *config.capacity);
  if (config.memory_fraction) {
    cap = std::min(cap, static_cast<std::uint64_t>(*config.memory_fraction *
                                                   static_cast<double>(total)));
  }
  return cap;
}

absl::StatusOr<StartedBackend> StartSim(const Config& config, int device) {
  SimBackendOptions options;
  // Devices apart by 512 GiB of addresses: a pointer names its device, as on GPUs.
  options.address_offset = static_cast<std::uint64_t>(device) << 39;
  // The simulated device is as large as the cap asked for (80 GiB without one).
  const std::uint64_t total = config.capacity.value_or(options.capacity);
  options.capacity = CapFor(config, total);
  auto sim = std::make_unique<SimBackend>(options);
  SimBackend* raw = sim.get();
  return StartedBackend{std::move(sim), "sim", total,
                        [raw](std::uint64_t cap) { raw->set_capacity(cap); }};
}

#ifdef GPUMEM_HAVE_CUDA
template <typename B>
StartedBackend Wrap(std::unique_ptr<B> backend, const char* name) {
  B* raw = backend.get();
  return StartedBackend{std::move(backend), name, raw->device_total_bytes(),
                        [raw](std::uint64_t cap) { raw->set_capacity(cap); }};
}

absl::StatusOr<StartedBackend> StartCuda(const Config& config, int device) {
  CudaBackendOptions options;
  options.device = device;
  bool vmm = config.backend == BackendKind::kVmm;
  if (config.backend == BackendKind::kAuto) {
    absl::StatusOr<bool> supported = DeviceSupportsVmm(device);
    if (!supported.ok()) return supported.status();
    vmm = *supported;
  }
  absl::StatusOr<StartedBackend> started;
  if (vmm) {
    auto b = CudaVmmBackend::Create(options);
    if (!b.ok()) return b.status();
    started = Wrap(*std::move(b), "vmm");
  } else {
    auto b = CudaMallocBackend::Create(options);
    if (!b.ok()) return b.status();
    started = Wrap(*std::move(b), "cudamalloc");
  }
  started->set_capacity(CapFor(config, started->device_total_bytes));
  return started;
}
#endif

}  // namespace

absl::StatusOr<StartedBackend> StartBackend(const Config& config, int device) {
  if (config.backend == BackendKind::kSim) return StartSim(config, device);
#ifdef GPUMEM_HAVE_CUDA
  return StartCuda(config, device);
#else
  return absl::UnavailableError(absl::StrCat(
      "device ", device, ": this libgpumem.so was built without the CUDA toolkit; only "
      "GPUMEM_BACKEND=sim works"));
#endif
}

}  // namespace gpumem::hooks
