// Synthetic traces of the ways unchanged training scripts run out of memory, each with a
// known right answer (tests/report/shapes_test.cc).
#pragma once

#include <cstdint>

#include "tools/trace/trace.h"

namespace gpumem::report::synthetic {

// A model that does not fit: 24 layers of one forward allocate from the same lines and
// keep their activations; the OOM comes in the first forward, no step ever finished.
// Right answer: a genuine peak, no steps inferred, no leak.
trace::Trace NoFitTrace();

// A validation loss summed as a tensor outside no_grad: each step's validation batch
// keeps 2 MiB of its graph (model.py:40 called from train.py:77 validate). Steps marked
// by optimizer hooks unless `marks` is false; 85 steps finish, the 86th runs out.
inline constexpr std::uint64_t kValidationLeakPerStep = 2ull << 20;
trace::Trace ValidationLeakTrace(bool marks = true);

// A leak that begins late: 20,000 healthy steps, then each step keeps an 8 MiB output
// (train.py:90 evaluate) until, about 60 steps later, one runs out. Right answer: a leak
// at 8 MiB a step, with its stack through evaluate; the 20,000 flat steps do not hide it.
inline constexpr std::uint64_t kLateLeakPerStep = 8ull << 20;
inline constexpr int kLateLeakStart = 20000;
trace::Trace LateLeakTrace();

// A batch longer every step (a length warm-up that overshoots): each step's input and
// output (train.py:41 fit, 1 MiB more a step) are still live at the optimizer's step
// hook and freed after it; nothing is kept from one step to the next, and the step that
// no longer fits runs out. Right answer: a genuine peak, no leak.
inline constexpr std::uint64_t kWarmupGrowthPerStep = 1ull << 20;
trace::Trace GrowingBatchTrace();

// A leak that keeps a 32 MiB output every tenth step (train.py:70 train), beside
// activations freed every step, until one runs out. Right answer: a leak at that site,
// at 3.2 MiB a step, though the site grows at one step end in ten.
inline constexpr std::uint64_t kStairLeakBytes = 32ull << 20;
inline constexpr int kStairLeakPeriod = 10;
trace::Trace StairLeakTrace();

// A history grown with torch.cat after every step (train.py:75 log): each step makes a
// copy 8 MiB longer and frees the old one, so only one copy is ever live and it was made
// in the step. Right answer: a leak at that site, at 8 MiB a step.
inline constexpr std::uint64_t kConcatGrowthPerStep = 8ull << 20;
trace::Trace ConcatenatedHistoryTrace();

// A run capped at 512 MiB by set_per_process_memory_fraction on a 1 GiB device (both
// recorded, no header capacity) that needs 640 MiB in its fourth step.
trace::Trace CappedPeakTrace();

// cuDNN-style caught OOMs: in each of the first 4 steps a convolution asks for a 4 GiB
// workspace 21 times, fails, and takes a 64 MiB one; 20 steps end normally. With
// `fatal_end`, a last OOM in step 21 ends the run (a genuine peak).
trace::Trace RecoveredOomsTrace(bool fatal_end = false);

}  // namespace gpumem::report::synthetic
