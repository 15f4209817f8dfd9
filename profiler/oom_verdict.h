// The verdict the dying process prints at an out-of-memory, before the exception reaches
// the program: the class (leak / fragmentation / genuine peak, by report::ClassifyOom),
// its evidence in figures, the top live sites with their growth per step, and the fix.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "profiler/process_memory.h"
#include "tools/report/library_keepers.h"
#include "tools/report/verdict_rules.h"

namespace gpumem {

struct VerdictSite {
  std::string name;           // "file:line function"
  std::uint64_t live = 0;
  double bytes_per_step = 0;  // its steady growth; 0 when it does not grow steadily
  bool holds_graph_pools = false;  // its live bytes include CUDA graph pools' memory
  report::Keeper keeper = report::Keeper::kNone;  // a growing site's: the library keeping it
};

// What one of this process's own libraries outside the allocator held on the device (the
// CUPTI tracer's count, profiler/library_holdings.h): the site holding most, and the
// steady growth of what it held over the step ends. The unusual libraries' (kOther), or
// the one whose memory grew.
struct LibraryHolding {
  report::OutsideLibrary library = report::OutsideLibrary::kOther;
  std::uint64_t bytes = 0;
  std::string site;
  std::optional<report::Growth> growth;
  std::size_t growth_steps = 0;  // the step ends the growth spans
};

struct OomVerdictInput {
  std::int32_t device = 0;
  report::OomFigures figures;
  bool gpumem_allocator = false;  // gpumem's allocator refused (it defragments first)
  std::size_t page_bytes = 0;     // gpumem's allocator: its page (0: not known)
  std::optional<std::uint64_t> driver_free;
  // The device's total (the driver's) and the allocator's reserved bytes: with driver_free,
  // what the allocator held against what the rest of the process held outside it.
  std::optional<std::uint64_t> driver_total;
  std::optional<std::uint64_t> reserved;
  // Of it, free inside private pools (CUDA graphs, torch.cuda.MemPool) other than the
  // request's: no use to it, and not fragmentation.
  std::uint64_t private_pools_free = 0;
  // NVML's figures of the device's processes: what other processes hold is not this
  // process's to give back.
  std::optional<DeviceProcesses> processes;
  LibraryHolding libraries;
  // What each library outside the allocator held (report::OutsideLibrary's order), where
  // the CUPTI tracer counted it.
  std::optional<std::array<std::uint64_t, report::kOutsideLibraries>> library_bytes;
  bool sites_recorded = false;    // a trace is open: the sites below have names
  std::vector<VerdictSite> sites;  // growing ones first, then the largest
  double growth_per_step = 0;     // the growing sites together (or the total's)
  std::size_t growth_steps = 0;   // step ends the growth was measured over
  // Set where no step was marked and passes stood in for steps (PassFinder): the site
  // whose allocation starts each pass. The figures' steps are then passes.
  std::string pass_start;
  // The site whose blocks a helper thread kept (figures.helper_kept_bytes), and how many.
  std::string helper_site;
  std::uint64_t helper_blocks = 0;
  std::string trace_path;         // flushed with this OOM; empty without a trace
  // The library whose code made the request that failed (for what it keeps); set before
  // the sites are described, which tell whether it keeps their growth.
  report::Keeper request_keeper = report::Keeper::kNone;
};

// Every step so far was a call of the model with grad before any backward pass
// (format::StepSource::kModelCallAwaitingBackward), `calls` of them: where they held more
// at each (growth suspected; not a batch-size finder's attempts, each freed when it
// failed), they are one unfinished iteration whose graphs wait for its backward
// (figures.first_iteration_calls; the figures' steps are then calls), and no step has
// finished.
void CountAsFirstIteration(std::size_t calls, OomVerdictInput* in);

// report::ClassifyOom; then memory held outside the allocator that this process's own
// libraries grew step by step is a leak (outside the allocator).
report::OomClass ClassifyDyingOom(const OomVerdictInput& in);

// Several lines, each starting "gpumem: ", ending in '\n'.
std::string OomVerdictText(const OomVerdictInput& in, report::OomClass cls);

// A library's memory outside the allocator that grew step by step, where an error of that
// library is the out-of-memory: "gpumem:   verdict: leak outside the allocator: ..." and
// "gpumem:   fix: ..."; empty where it did not grow.
std::string OutsideLeakLines(const LibraryHolding& library);

}  // namespace gpumem
