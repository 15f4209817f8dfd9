// Small synthetic traces with a known answer, one per OOM class, and a large one for the
// speed benchmark. Stacks look like a PyTorch training script's: a library frame
// innermost, then the user's lines.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tools/trace/trace.h"

namespace gpumem::report::synthetic {

inline constexpr std::uint64_t kMiB = 1ull << 20;
inline constexpr std::uint64_t kCapacity = 1024 * kMiB;

// 128 MiB of parameters, 256 MiB of activations per step, and 16 MiB per step kept
// alive from train.py:42 (the leak); step markers; OOM in step 41 when the device is full.
inline constexpr std::uint64_t kLeakPerStep = 16 * kMiB;
trace::Trace LeakTrace();

// Steady steps that use one 512 MiB segment in 16 MiB blocks; the last step keeps every
// other block, leaving 256 MiB free in 16 MiB pieces, then asks for 128 MiB with 64 MiB
// left on the device: enough memory in total, no piece big enough.
trace::Trace FragmentationTrace();

// Ten steady steps of 8 x 64 MiB activations over 256 MiB of parameters, then a step that
// needs 13 x 64 MiB: no growth at step ends, no free cached memory, a genuine peak.
trace::Trace PeakTrace();

// A batch-size finder doubles a 64 MiB batch over 256 MiB of parameters until the 512 MiB
// batch runs out of memory; the program catches it and trains 20 steps with the 256 MiB
// batch and 288 MiB of optimizer state. The finder's segments stay cached (448 MiB idle
// after each step), so cuBLAS's 32 MiB workspace (cuMemAlloc, with 16 MiB free on the
// driver) fails in validation: the last thing in the trace.
inline constexpr std::uint64_t kFinderIdle = 448 * kMiB;
inline constexpr std::uint64_t kCublasWorkspace = 32 * kMiB;
trace::Trace FinderThenFailedCublasTrace();

// About `events` events: steps of `events_per_step` from `sites` sites, a leak of
// `leak_per_step` bytes a step from train.py:42, segment events and step markers. For
// the speed benchmarks.
trace::Trace LargeTrace(std::size_t events, std::size_t events_per_step = 10000,
                        std::size_t sites = 64, std::uint64_t leak_per_step = 64 * 1024);

}  // namespace gpumem::report::synthetic
