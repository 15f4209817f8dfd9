// The rules shared by the offline report and the verdict the dying process prints
// (profiler/live_view.h): what counts as steady growth, how an OOM is classed, the fix for
// each class, where a site is and how bytes read. One copy, so that the process at its OOM
// and `gpumem report` afterwards say the same thing about the same figures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "allocator/size_classes.h"
#include "profiler/process_memory.h"
#include "tools/report/library_kind.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gpumem::report {

// kHeldApart: free memory in pieces large enough, but not this request's to use (the
// private pools of CUDA graphs or MemPools still alive; under PyTorch's allocator also
// blocks cached for another stream). kHeldOutside: the allocator's budget had room, the
// device did not: other processes, or a library of this one that is not CUDA's own
// (a CUDA extension's cudaMalloc, another framework's pool), held it.
enum class OomClass { kLeak, kFragmentation, kPeak, kHeldApart, kHeldOutside };
// "leak", "fragmentation", "peak", "held apart", "held outside"
const char* OomClassName(OomClass c);
// The class as a verdict says it: "leak", "fragmentation", "genuine peak", "free memory
// held apart", "memory held outside the allocator".
const char* OomVerdictName(OomClass c);
// A growing site named with the call its kept blocks came through (CallApart, or the
// caller of a call that returned while they stayed: CallReturns): "SITE, called from
// CALL"; the site alone if `call` is empty.
std::string SiteWithCall(absl::string_view site, absl::string_view call);
// The fix for an OOM of class `c`; for a leak whose growth CUDA graph pools hold, the
// graphs' (kGraphPoolLeakFix).
const char* OomFix(OomClass c, bool growth_in_graph_pools = false);
// A held-outside OOM's fix by who held the memory (HeldOutsideHolders' figures): other
// processes alone, this process's libraries alone, or, both or neither known, either.
const char* HeldOutsideFix(std::uint64_t other_processes, std::uint64_t libraries);
// A leak whose growing site captures CUDA graphs that stay alive: each keeps its pool.
extern const char* const kGraphPoolLeakFix;
// What a leak's growth is part of: " of the X allocated", or, where CUDA graph pools hold
// it (their free memory counts with their site, so more than was allocated can grow),
// " held by blocks and CUDA graph pools".
std::string GrowthHeldIn(bool growth_in_graph_pools, std::uint64_t allocated);

// Below this many finished steps there is no growth to measure: an OOM is a peak or
// fragmentation, never a leak.
inline constexpr std::size_t kMinStepsForLeak = 3;

struct LinearFit {
  double slope = 0;      // per step
  double intercept = 0;
  double r2 = 0;         // 1 = a straight line
};
// Least squares of y over x; r2 is 0 when y is constant.
LinearFit FitLine(absl::Span<const double> x, absl::Span<const double> y);

// Step ends a growth fit needs; and one that began late, after the series started.
inline constexpr std::size_t kMinGrowthSamples = 4;
inline constexpr std::size_t kMinLateGrowthSamples = 8;

struct Growth {
  double bytes_per_step = 0;  // the fit's slope
  double r2 = 0;
  double rising_share = 0;    // share of step-to-step changes that are increases
  std::uint64_t grown = 0;    // last - first
  std::size_t from = 0;       // the sample the fitted window starts at
};
// The least growth worth calling a leak: 1 MiB, or 0.5% of the peak if more.
double MinLeakGrowth(std::uint64_t peak_allocated);
// Live bytes of one site at step ends `steps`: a Growth when they grow steadily by at
// least `min_growth` (a good straight-line fit, rising at most step ends; or a straighter
// one rising in steps, at a few step ends in every part of the series and falling at
// hardly any), else nullopt.
std::optional<Growth> SteadyGrowth(absl::Span<const double> steps,
                                   absl::Span<const std::uint64_t> live, double min_growth);
// The most a site has held, and the least it has held since: what tells a site that fills
// and gives back each phase (a validation pass that gathers its outputs, then reduces them)
// from one that keeps what it took. Fed every step end of the site, in order.
class FillLevel {
 public:
  void Add(std::uint64_t live);
  // A growth from `start` to `now` repeats a fill already given back: the site held about
  // as much before (`now` at most an eighth of the rise above its most) and fell from
  // that back to `start` or below.
  bool Refills(std::uint64_t start, std::uint64_t now) const;

 private:
  std::uint64_t most_ = 0;
  std::uint64_t least_since_most_ = UINT64_MAX;
};

// The same, where the growth may have begun late (a leak that starts in the evaluation
// phase, or after thousands of healthy steps): the longest of the whole series and its
// later halves, quarters, ... (down to kMinLateGrowthSamples) that grows steadily and
// does not refill what the site gave back before (`fill`: the site's FillLevel over at
// least `live`, kept by a caller that sees more of the site than `live`; by default
// taken from `live`).
std::optional<Growth> RecentSteadyGrowth(absl::Span<const double> steps,
                                         absl::Span<const std::uint64_t> live,
                                         double min_growth,
                                         const FillLevel* fill = nullptr);

// Blocks that a helper thread (neither one running the loop, profiler/package_notes.h,
// nor one running autograd's backward) allocated at one site and still holds: a queue
// that a loader or prefetch thread fills faster than the loop takes from it. Before
// steps can show growth (a slow first step: torch.compile, cuDNN's benchmark, a tracer),
// such a site is the one sign of a leak.
struct HelperKept {
  std::uint64_t bytes = 0;        // live
  std::uint64_t blocks = 0;       // live blocks
  std::uint64_t main_allocs = 0;  // the loop threads' allocations between the site's first
                                  // allocation and its last
  std::uint64_t first_size_blocks = 0;  // live blocks of the size of the site's first
  // What the training's threads (the loop's and autograd's) allocated on the device since
  // the site's latest block.
  std::uint64_t loop_bytes_since_last = 0;
};
// A few batches queued ahead are a prefetcher doing its job. What tells a queue from
// weights that a thread pool loads (while the main thread waits, allocating nothing) is
// that the loop allocated meanwhile, or that its items are alike: a queue's batches have
// one shape, a model's weights many. A first step that compiles allocates nothing for
// seconds. Alike is seven in eight: a transformer's activations at the line that calls
// it are about two thirds of one shape, by a count of what a Llama layer keeps for its
// backward (not measured on a GPU), should a loop's thread go unnoted.
// A thread that stopped adding blocks while the training went on to allocate at least
// half as much as the thread holds is waiting for the loop (a bounded queue, full): what
// it holds is a standing cost, as weights are. An unbounded queue is still filling when
// memory runs out.
inline constexpr std::uint64_t kMinHelperKeptBlocks = 32;
inline constexpr std::uint64_t kMinLoopAllocs = 8;
inline bool KeptByHelper(const HelperKept& k) {
  const bool alike = k.first_size_blocks * 8 >= k.blocks * 7;
  const bool waiting = k.loop_bytes_since_last * 2 >= k.bytes;
  return k.blocks >= kMinHelperKeptBlocks && !waiting &&
         (k.main_allocs >= kMinLoopAllocs || alike);
}
// The fix for such a leak.
extern const char* const kHelperKeptFix;
// Such a site as both verdicts name it: "a thread other than the loop's kept 406 blocks
// (3.17 GiB) at SITE, which the loop had not taken".
std::string HelperKeptText(const HelperKept& kept, absl::string_view site);

// What an OOM is classed from.
struct OomFigures {
  std::size_t finished_steps = 0;
  std::uint64_t allocated = 0;
  std::uint64_t request = 0;
  std::uint64_t capacity = 0;
  std::uint64_t free_cached = 0;    // reserved - allocated
  std::optional<std::uint64_t> largest_free;  // nullopt: the allocator does not say
  bool growth_suspected = false;    // some site (or the total) grows steadily
  std::uint64_t grown_bytes = 0;    // what that growth added by the OOM
  // Nonzero where no iteration had finished: every step so far was a call of the model
  // with grad before any backward pass, this many of them (the steps are then calls).
  std::size_t first_iteration_calls = 0;
  // Live bytes of the site a helper thread kept blocks at (KeptByHelper); 0: none.
  std::uint64_t helper_kept_bytes = 0;
  // Whether `capacity` is a cap (set, or the device's total) and not a stand-in (what
  // the process held plus what the driver had free).
  bool capacity_known = true;
  // What the driver had free on the device at the OOM; nullopt: it did not say.
  std::optional<std::uint64_t> device_free;
  // What was held on the device outside the allocator and outside what a training
  // process holds there anyway (its CUDA context, cuBLAS, cuDNN and NCCL): other
  // processes', and this process's other libraries'.
  std::uint64_t held_outside = 0;
  // gpumem's headroom, where keeping it free for other libraries refused the request:
  // what the request needed the driver to have free on top of it.
  std::uint64_t headroom = 0;
  // The request was made by the library that keeps the growing memory, processing what it
  // keeps (a metric's compute() concatenating its states): it grows with the leak, so
  // the growth explains the OOM even where the request alone would not have fit.
  bool request_from_grower = false;
};
// The end of a leak's evidence: "without it the request of X would have fit in the cap
// of Y", or, where it would not have (OomFigures::request_from_grower), that the request
// was made by `requester` for what it keeps.
std::string LeakRequestText(const OomFigures& f, absl::string_view requester);
// Where a leak's OOM came early because the cache held much free memory in pieces too
// small for the request (5% of the cap or more): "; the cache also held X free, in pieces
// of at most Y (fragmentation), which brought this OOM about N steps early" (`unit` and
// `units`: "step" and "steps", or passes). Empty elsewhere.
std::string LeakCutShortText(const OomFigures& f, double bytes_per_step, absl::string_view unit,
                             absl::string_view units);
// Whether memory held outside the allocator took the room the request needed: the
// device had less free than the request (and gpumem's headroom) needed, the cap (where
// there is one) had room for it, and with what was held outside (OomFigures::held_outside)
// given back the device would have had that room.
bool HeldOutsideExplains(const OomFigures& f);
// The fix where that memory is a library of this process that grows from step to step:
// for NCCL, communicators made and never destroyed; for the rest, allocations kept.
const char* OutsideLeakFix(OutsideLibrary library);
// What such a leak usually is, in a few words: "a library of this process took device
// memory from the driver every step and kept it"; NCCL's: process groups made each step.
const char* OutsideLeakCause(OutsideLibrary library);
// Who holds memory outside the allocator, as the verdicts name it: the site for an unusual
// library (kOther); for a known one, all its memory and the user's line it was for: "NCCL's
// memory for f.py:3 g" ("NCCL's memory" where no line is known).
std::string OutsideHolderName(OutsideLibrary library, absl::string_view site);
// Such an OOM's room as both verdicts say it: "the request of 32.00 MiB was under the cap
// of 4.00 GiB (allocated 129.03 MiB), but the driver had 27.56 MiB free" ("needed memory
// from the driver" where there was no cap), and "(gpumem keeps 512.00 MiB free for other
// libraries)" where gpumem's headroom refused it. Needs f.device_free.
std::string HeldOutsideRoomText(const OomFigures& f);
// Who held it: "other processes held 138.85 GiB (pid 2848 138.85 GiB), and libraries of
// this process other than the allocator, NCCL, cuBLAS and cuDNN held 1.00 GiB, most of it
// from f.py:3 g" (`processes`: ProcessesText of the others; each part where non-zero).
std::string HeldOutsideHolders(std::uint64_t other_processes, absl::string_view processes,
                               std::uint64_t libraries, absl::string_view library_site);
// Such an OOM's evidence, both verdicts' (without the closing full stop): the room, who
// held it (HeldOutsideHolders), and that without that memory the request would have fit.
std::string HeldOutsideText(const OomFigures& f, absl::string_view holders);
// "f.py:3 g took 256.00 MiB per step from the driver and kept it, over the last 40 step
// ends": a library's memory that grew (`holder`: OutsideHolderName).
std::string OutsideGrowthText(absl::string_view holder, double bytes_per_step,
                              std::size_t step_ends);
// A leak outside the allocator: "memory held outside the allocator grew: f.py:3 g took
// 256.00 MiB per step from the driver and kept it, over the last 40 step ends (10.00 GiB
// at the OOM); " then the room, and that without it the request would have fit. `holder`:
// OutsideHolderName.
std::string OutsideLeakText(absl::string_view holder, double bytes_per_step,
                            std::size_t step_ends, std::uint64_t held, const OomFigures& f);
// Whether the OOM is a leak for the helper's kept blocks (OomFigures::helper_kept_bytes)
// and not for growth over steps: too few steps had finished to measure growth, and
// without those blocks the request would have fit.
bool HelperKeptExplains(const OomFigures& f);
// A run that died in its first iteration, every step so far a call of the model with grad
// before any backward pass: what to do about an iteration too large.
inline constexpr absl::string_view kFirstIterationFix =
    "One iteration here is every call of the model before its backward (an episode of "
    "actions, losses summed over micro-batches): call backward() more often, after each "
    "micro-batch or on shorter episodes, so that each call's graph is freed; if no backward "
    "is meant, call the model under torch.no_grad()";
// A genuine peak's evidence for such a run: why no step had finished after `calls` calls.
std::string FirstIterationGrowth(std::size_t calls);
// Leak when steady growth over finished steps explains it (without the growth the request
// would have fit), or before enough steps when a helper thread's kept blocks do; a genuine peak when that growth came within the first iteration (its
// own size, whatever was cut into pieces); fragmentation when enough was cached but in no
// piece big enough; else a genuine peak.
OomClass ClassifyOom(const OomFigures& f);

// Files of code the user does not edit (torch, installed packages, the standard library,
// native libraries, the Python interpreter's binary): a site is the innermost frame outside
// them.
bool IsLibraryFile(absl::string_view file);

// Of two stacks of one site (frames innermost first), the index in `kept` of its innermost
// user frame outside the site's own (its first) that `other` lacks: the call through which
// a site's kept blocks came where its freed ones came another way. nullopt when none.
template <typename Frame, typename IsLibrary, typename Same>
std::optional<std::size_t> CallApart(const std::vector<Frame>& kept,
                                     const std::vector<Frame>& other, IsLibrary is_library,
                                     Same same) {
  bool past_site = false;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    if (is_library(kept[i])) continue;
    if (!past_site) {
      past_site = true;
      continue;
    }
    bool shared = false;
    for (const Frame& o : other) shared = shared || same(kept[i], o);
    if (!shared) return i;
  }
  return std::nullopt;
}

// Whether a frame of `function`, named as the caller of a site's function (where no other
// stack tells the kept blocks apart), tells nothing: a module's top level.
inline bool CallerTellsNothing(absl::string_view function) { return function == "<module>"; }

// The device memory a block of `requested` bytes takes: both allocators (gpumem's, and
// PyTorch's with its 512-byte minimum block) hand out blocks in multiples of kBlockAlign,
// so a site that keeps one scalar a step keeps 512 bytes a step, 128 times what was asked
// for. Sites are judged by what they cost the device.
inline std::uint64_t DeviceBytes(std::uint64_t requested) {
  return RoundUp(requested, kBlockAlign);
}

// Human-readable bytes: "1.50 GiB".
std::string Bytes(double bytes);

// "pid 4242": a process as ProcessesText names it unless told otherwise.
std::string PidName(std::uint32_t pid);

// Processes on a device, the largest first, at most `most`, then how many more: "pid 4242
// 2.50 GiB, pid 77 512.00 MiB, 3 more". `who` names each one.
std::string ProcessesText(std::vector<ProcessBytes> processes, std::size_t most = 4,
                          absl::FunctionRef<std::string(std::uint32_t pid)> who = PidName);

}  // namespace gpumem::report
