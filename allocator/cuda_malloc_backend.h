// CudaMallocBackend: device memory as plain segments (cuMemAlloc / cuMemFree), for
// devices without virtual memory management or when GPUMEM_BACKEND=cudamalloc. It also
// holds what every CUDA backend shares: the device's primary context (made current around
// each call, whatever thread calls), stream events, byte counters and the capacity cap.
// CudaVmmBackend extends it with the virtual-memory calls.
#pragma once

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/backend.h"
#include "allocator/cuda_driver.h"

namespace gpumem {

struct CudaBackendOptions {
  int device = 0;
  // Bytes this backend may hold; 0 means the device's total memory (cuMemGetInfo). The
  // driver's own out-of-memory error still applies below the cap.
  std::uint64_t capacity = 0;
};

class CudaMallocBackend : public Backend {
 public:
  // Retains the device's primary context. Unavailable where there is no driver or device.
  static absl::StatusOr<std::unique_ptr<CudaMallocBackend>> Create(CudaBackendOptions options);
  ~CudaMallocBackend() override;

  std::size_t granularity() const override { return granularity_; }
  std::uint64_t capacity() const override { return capacity_.load(); }
  bool supports_vmm() const override { return false; }
  // cuMemGetInfo's free bytes (the cap limits gpumem, not the libraries this is for);
  // what the cap leaves if the call fails.
  std::uint64_t DeviceFreeBytes() const override;

  absl::StatusOr<DevicePtr> ReserveAddressRange(std::size_t bytes) override;
  void ReleaseAddressRange(DevicePtr base, std::size_t bytes) override;
  absl::StatusOr<PhysicalHandle> CreatePhysical(std::size_t bytes) override;
  void ReleasePhysical(PhysicalHandle handle) override;
  absl::Status Map(DevicePtr va, std::size_t bytes, PhysicalHandle handle,
                   std::size_t offset) override;
  absl::Status Unmap(DevicePtr va, std::size_t bytes) override;

  absl::StatusOr<DevicePtr> AllocateSegment(std::size_t bytes) override;
  void FreeSegment(DevicePtr ptr, std::size_t bytes) override;

  EventHandle RecordEvent(StreamId stream) override;
  absl::Status StreamWaitEvent(StreamId waiter, EventHandle event) override;
  bool EventCompleted(EventHandle event) override;
  void ReleaseEvent(EventHandle event) override;
  void Synchronize() override;

  BackendCounters counters() const override;

  // The cap may change at run time (torch.cuda.set_per_process_memory_fraction).
  void set_capacity(std::uint64_t capacity) { capacity_.store(capacity); }
  std::uint64_t device_total_bytes() const { return total_bytes_; }
  int device() const { return device_; }

 protected:
  // The device with its primary context retained: what every CUDA backend starts from.
  struct OpenDevice {
    const cuda::DriverApi* api;
    int device;
    CUdevice cu_device;
    CUcontext context;
    std::uint64_t total_bytes;
    std::uint64_t capacity;
  };
  static absl::StatusOr<OpenDevice> Open(const CudaBackendOptions& options);
  explicit CudaMallocBackend(const OpenDevice& open);

  // Reserves `bytes` against the cap; ResourceExhausted past it.
  absl::Status ChargeCapacity(std::size_t bytes, const char* what);
  void Uncharge(std::size_t bytes);
  // Logs a failure that a void call cannot return (it would otherwise be lost).
  void LogFailure(const absl::Status& status) const;
  // The same for a failed driver call; quiet once the driver has shut down (the process
  // is exiting, and every context went with the driver: there is nothing left to give
  // back or wait for).
  void LogFailure(CUresult result, const char* call) const;

  // Host time in driver calls: on the callers' threads, and on the allocator's own.
  struct CallTimes {
    std::atomic<std::uint64_t> host_ns{0};
    std::atomic<std::uint64_t> background_ns{0};
  };
  // Adds the host time of one call into the driver, its context switch included, to
  // `host_call_ns` or, on the allocator's own threads, `background_call_ns` (two clock
  // reads: small beside the microseconds of any such call).
  class CallClock {
   public:
    explicit CallClock(CallTimes& times)
        : total_(t_background_driver_calls ? times.background_ns : times.host_ns),
          start_(std::chrono::steady_clock::now()) {}
    ~CallClock() {
      const auto spent = std::chrono::steady_clock::now() - start_;
      total_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count(),
                       std::memory_order_relaxed);
    }
    CallClock(const CallClock&) = delete;
    CallClock& operator=(const CallClock&) = delete;

   private:
    std::atomic<std::uint64_t>& total_;
    const std::chrono::steady_clock::time_point start_;
  };

  const cuda::DriverApi& api_;
  const int device_;
  const CUdevice cu_device_;
  const CUcontext context_;
  const std::uint64_t total_bytes_;
  std::size_t granularity_ = std::size_t{2} << 20;
  std::atomic<std::uint64_t> capacity_;

  mutable std::mutex mu_;  // guards counters_ and the event pool
  BackendCounters counters_;
  std::vector<CUevent> free_events_;  // created events kept for reuse: creation is slow
  mutable CallTimes call_ns_;  // see CallClock
};

}  // namespace gpumem
