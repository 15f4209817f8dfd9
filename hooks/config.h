// gpumem's start-up configuration, read from GPUMEM_* environment variables in one place.
// Every variable is validated: a bad value is an error naming the variable and the values
// it accepts, and the library refuses to start rather than guess. The table of variables
// in README.md mirrors kConfigVariables below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "profiler/byte_size.h"

namespace gpumem::hooks {

enum class BackendKind {
  kAuto,        // CUDA VMM where the device supports it, else cudaMalloc segments
  kVmm,         // CUDA VMM, or fail
  kCudaMalloc,  // plain cuMemAlloc segments
  kSim,         // the host simulation: tests of the C ABI without a GPU
};

enum class Mode {
  kAllocator,  // gpumem is PyTorch's CUDA allocator (and records when GPUMEM_TRACE is set)
  kProfile,    // PyTorch keeps its own allocator; gpumem only records it (always traced)
};

struct Config {
  Mode mode = Mode::kAllocator;  // GPUMEM_MODE
  BackendKind backend = BackendKind::kAuto;
  // Per-device cap in bytes (GPUMEM_CAPACITY); nullopt: the device's memory.
  std::optional<std::uint64_t> capacity;
  // Share of the device's memory (GPUMEM_MEMORY_FRACTION), applied after the device's
  // total is known; the smaller of the two caps wins.
  std::optional<double> memory_fraction;
  // Where the profiler writes its trace (GPUMEM_TRACE); empty: no trace.
  std::string trace_path;
  // GPUMEM_TRACE_MAX: the trace becomes a ring of segments bounded on disk (0: unbounded).
  std::uint64_t trace_max_bytes = 0;
  // Device memory kept free for libraries that allocate outside gpumem (GPUMEM_HEADROOM);
  // nullopt: HeadroomFor's default.
  std::optional<std::uint64_t> headroom;
  bool stitch = true;      // GPUMEM_STITCH: remap idle pages into new ranges (defrag)
  bool borrow = true;      // GPUMEM_BORROW: a stream may take another stream's free block
  bool medium_heap = true;  // GPUMEM_MEDIUM_HEAP: blocks of 64 KiB-1 MiB in a heap apart
  bool background_unmap = true;  // GPUMEM_BACKGROUND_UNMAP: lent pages unmapped off-thread
  std::uint64_t page_bytes = 0;  // GPUMEM_PAGE_SIZE: the unit of mapping; 0: auto (page_size.h)
  bool thread_cache = true;  // GPUMEM_THREAD_CACHE: per-thread caches in front of the lock
  bool log_oom = true;     // GPUMEM_LOG_OOM: print the OOM report to stderr
  bool verbose = false;    // GPUMEM_VERBOSE: print each device's backend at start
  // GPUMEM_LEAK_WARN_STEPS: warn when a site's live memory rose at this many step ends in
  // a row (0: never). 5: a training step returns to the same live set, and what a step
  // legitimately adds (optimizer state at the first optimizer step, the grad scaler's
  // first steps, caches filled by the first shapes) stops within two or three steps;
  // five rises in a row, each adding to at least 1 MiB and 0.5% of the peak in all, is a
  // leak, told ~5 steps after it starts while a run that OOMs after tens of steps still
  // has most of them left.
  std::size_t leak_warn_steps = 5;
};

// Reads a variable; returns nullptr when unset. Tests pass their own.
using EnvLookup = std::function<const char*(const char*)>;

// InvalidArgument "GPUMEM_X='bad': expected ..." for the first bad variable.
absl::StatusOr<Config> ParseConfig(const EnvLookup& env);
// The process environment.
absl::StatusOr<Config> ParseConfigFromEnvironment();

// The headroom a device keeps: GPUMEM_HEADROOM, else kDefaultHeadroom on a real device
// and 0 on the simulation (whose tests size their own device).
// 512 MiB: what the libraries a training process creates after filling the device take
// outside the allocator: a cuBLAS handle's workspace (32 MiB on Hopper, one per stream and
// thread), cuDNN's handle, an NCCL communicator's buffers (tens to a few hundred MiB with
// 8 peers), a cuFFT plan; 0.6 % of an 80 GiB H100.
inline constexpr std::uint64_t kDefaultHeadroom = std::uint64_t{512} << 20;
std::uint64_t HeadroomFor(const Config& config, bool simulated);

// "512", "64K", "1.5G", "80GiB", ... (K/M/G/T are powers of 1024). For GPUMEM_CAPACITY.
using gpumem::ParseBytes;

struct ConfigVariable {
  const char* name;
  const char* accepted;
  const char* meaning;
};
// Every variable gpumem reads, for the README table and `gpumem run --help`.
extern const ConfigVariable kConfigVariables[];
extern const int kConfigVariableCount;

}  // namespace gpumem::hooks
