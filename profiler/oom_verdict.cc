#include "profiler/oom_verdict.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpumem {

using report::Bytes;
using report::ProcessesText;
using report::OomClass;

namespace {

// What the figures count: steps, the passes that stood in for them, or the calls of an
// unfinished first iteration.
const char* Unit(const OomVerdictInput& in) {
  if (in.figures.first_iteration_calls > 0) return "call";
  return in.pass_start.empty() ? "step" : "pass";
}
const char* Units(const OomVerdictInput& in) {
  if (in.figures.first_iteration_calls > 0) return "calls";
  return in.pass_start.empty() ? "steps" : "passes";
}

// The growth part of a genuine peak's evidence.
std::string PeakGrowth(const OomVerdictInput& in) {
  const report::OomFigures& f = in.figures;
  if (f.first_iteration_calls > 0) return report::FirstIterationGrowth(f.first_iteration_calls);
  if (f.finished_steps < report::kMinStepsForLeak) {
    return absl::StrCat("only ", f.finished_steps, " ",
                        f.finished_steps == 1 ? Unit(in) : Units(in),
                        " had finished, too few to call growth a leak");
  }
  return absl::StrCat("memory kept from ", Unit(in), " to ", Unit(in),
                      " did not grow enough to explain it");
}

// The fastest-growing site captures CUDA graphs kept alive: their pools are its growth.
bool GrowsInGraphPools(const OomVerdictInput& in) {
  return !in.sites.empty() && in.sites.front().bytes_per_step > 0 &&
         in.sites.front().holds_graph_pools;
}

// A leak told by a helper thread's kept blocks, before steps could show growth.
bool HelperLeak(const OomVerdictInput& in, OomClass cls) {
  return cls == OomClass::kLeak && report::HelperKeptExplains(in.figures) &&
         !in.helper_site.empty();
}

std::string HelperEvidence(const OomVerdictInput& in) {
  const report::OomFigures& f = in.figures;
  return absl::StrCat(
      report::HelperKeptText({.bytes = f.helper_kept_bytes, .blocks = in.helper_blocks},
                             in.helper_site),
      "; ", f.finished_steps, " ",
      f.finished_steps == 1 ? Unit(in) : Units(in),
      " had finished, too few to measure growth, and without those blocks the request of ",
      Bytes(f.request), " would have fit in the cap of ", Bytes(f.capacity));
}

// A leak told by this process's libraries' memory outside the allocator (ClassifyDyingOom).
bool OutsideLeak(const OomVerdictInput& in, OomClass cls) {
  return cls == OomClass::kLeak && in.libraries.growth &&
         report::ClassifyOom(in.figures) == OomClass::kHeldOutside;
}

std::string HeldOutsideEvidence(const OomVerdictInput& in, OomClass cls) {
  const report::OomFigures& f = in.figures;
  const LibraryHolding& lib = in.libraries;
  if (OutsideLeak(in, cls)) {
    return report::OutsideLeakText(report::OutsideHolderName(lib.library, lib.site),
                                   lib.growth->bytes_per_step, lib.growth_steps, lib.bytes, f);
  }
  const std::uint64_t others = in.processes ? in.processes->others_bytes() : 0;
  const std::string named = others > 0 ? ProcessesText(in.processes->others) : "";
  return report::HeldOutsideText(f, report::HeldOutsideHolders(others, named, lib.bytes, lib.site));
}

std::string Fix(const OomVerdictInput& in, OomClass cls) {
  if (HelperLeak(in, cls)) return report::kHelperKeptFix;
  if (OutsideLeak(in, cls)) return report::OutsideLeakFix(in.libraries.library);
  if (cls == OomClass::kHeldOutside) {
    return report::HeldOutsideFix(in.processes ? in.processes->others_bytes() : 0,
                                  in.libraries.bytes);
  }
  const report::Keeper grower = in.sites.empty() || in.sites.front().bytes_per_step <= 0
                                    ? report::Keeper::kNone
                                    : in.sites.front().keeper;
  return report::FixWithKeeper(cls, grower, in.request_keeper,
                               report::OomFix(cls, GrowsInGraphPools(in)));
}

std::string Evidence(const OomVerdictInput& in, OomClass cls) {
  const report::OomFigures& f = in.figures;
  if (HelperLeak(in, cls)) return HelperEvidence(in);
  if (OutsideLeak(in, cls)) return HeldOutsideEvidence(in, cls);
  const std::string driver =
      in.driver_free ? absl::StrCat("; the driver had ", Bytes(*in.driver_free), " free") : "";
  const char* unit = Unit(in);
  switch (cls) {
    case OomClass::kLeak:
      return absl::StrCat("memory kept from ", unit, " to ", unit, " grew by ",
                          Bytes(in.growth_per_step), " per ", unit, " over the last ",
                          in.growth_steps, " ", unit, " ends; ", Bytes(f.grown_bytes),
                          report::GrowthHeldIn(GrowsInGraphPools(in), f.allocated),
                          " is that growth, and ",
                          report::LeakRequestText(f, report::KeeperName(in.request_keeper)),
                          report::LeakCutShortText(f, in.growth_per_step, unit, Units(in)));
    case OomClass::kFragmentation:
      return absl::StrCat(
          Bytes(f.free_cached), " was cached free (more than the request of ", Bytes(f.request),
          ") but the largest free piece was ",
          f.largest_free ? Bytes(*f.largest_free) : std::string("smaller than the request"),
          "; allocated ", Bytes(f.allocated), " of the cap of ", Bytes(f.capacity), driver);
    case OomClass::kHeldApart:
      return absl::StrCat(Bytes(f.free_cached), " was cached free, in pieces as large as ",
                          Bytes(*f.largest_free), " (the request: ", Bytes(f.request),
                          "), and allocated ", Bytes(f.allocated), " is under the cap of ",
                          Bytes(f.capacity), ", yet the request was refused", driver);
    case OomClass::kHeldOutside:
      return HeldOutsideEvidence(in, cls);
    case OomClass::kPeak:
      break;
  }
  return absl::StrCat("allocated ", Bytes(f.allocated), " plus the request of ", Bytes(f.request),
                      " is ", Bytes(f.allocated + f.request), " against the cap of ",
                      Bytes(f.capacity), "; cached free memory (", Bytes(f.free_cached),
                      ") could not cover it", driver, "; ", PeakGrowth(in));
}

void AppendSites(const OomVerdictInput& in, std::string* out) {
  if (!in.sites_recorded) {
    absl::StrAppend(out, "gpumem:   sites: not recorded; run with GPUMEM_TRACE=<file> (or "
                         "`gpumem run`) and this message names the site that holds or grows "
                         "the memory\n");
    return;
  }
  if (in.sites.empty()) return;
  absl::StrAppend(out, "gpumem:   top live sites (live, growth per ", Unit(in), "):\n");
  for (const VerdictSite& s : in.sites) {
    const std::string growth =
        s.bytes_per_step > 0 ? absl::StrCat("+", Bytes(s.bytes_per_step), "/", Unit(in))
                             : "steady";
    absl::StrAppendFormat(out, "gpumem:     %-12s %-18s %s%s\n", Bytes(static_cast<double>(s.live)),
                          growth, s.name, report::KeptByText(s.keeper));
  }
}

// What memory outside the allocator is: by library where the CUPTI tracer counted it
// ("NCCL 2.30 GiB, cuBLAS 130.00 MiB, the rest 1.00 GiB: the CUDA context, kernels and
// calls not seen"), else what it usually is.
std::string OutsideParts(const OomVerdictInput& in, std::uint64_t outside) {
  if (!in.library_bytes) return "CUDA context, NCCL, cuBLAS, cuDNN workspaces";
  std::string parts;
  std::uint64_t named = 0;
  for (std::size_t i = 0; i < in.library_bytes->size(); ++i) {
    const std::uint64_t bytes = (*in.library_bytes)[i];
    if (bytes == 0) continue;
    const auto library = static_cast<report::OutsideLibrary>(i);
    absl::StrAppend(&parts, parts.empty() ? "" : ", ",
                    library == report::OutsideLibrary::kOther ? "other libraries of this process"
                                                               : report::OutsideLibraryName(library),
                    " ", Bytes(static_cast<double>(bytes)));
    named += bytes;
  }
  absl::StrAppend(&parts, parts.empty() ? "" : ", ", "the rest ",
                  Bytes(static_cast<double>(outside - std::min(outside, named))),
                  ": the CUDA context, kernels and calls not seen");
  return parts;
}

// "the allocator held 70.1 GiB, outside it 3.4 GiB ... of 79.2 GiB": where the driver said;
// other processes' memory on the device apart, where NVML named them.
void AppendOutside(const OomVerdictInput& in, std::string* out) {
  if (!in.driver_free || !in.driver_total || !in.reserved) return;
  const std::uint64_t used = *in.driver_total - std::min(*in.driver_total, *in.driver_free);
  const std::uint64_t others = in.processes ? in.processes->others_bytes() : 0;
  const std::uint64_t outside = used - std::min(used, *in.reserved + others);
  absl::StrAppend(out, "gpumem:   memory: the allocator held ", Bytes(*in.reserved),
                  ", outside it ", Bytes(outside), " (", OutsideParts(in, outside), ")",
                  others != 0 ? absl::StrCat(", other processes ", Bytes(others)) : "", " of ",
                  Bytes(*in.driver_total),
                  "; `gpumem report` on the trace splits it by library\n");
  if (others == 0) return;
  absl::StrAppend(out, "gpumem:   other processes hold ", Bytes(others), " of this GPU (",
                  ProcessesText(in.processes->others),
                  "): a DataLoader worker or another rank that made a CUDA context here "
                  "(torch.cuda.set_device(local_rank) before any CUDA call), or another job\n");
}

// Memory that graphs kept alive hold for their replays: reserved, free, and not the
// request's to use.
void AppendPrivatePools(const OomVerdictInput& in, std::string* out) {
  if (in.private_pools_free == 0) return;
  const report::OomFigures& f = in.figures;
  const bool would_fit = f.allocated + f.request <= f.capacity;
  absl::StrAppend(out, "gpumem:   pools: ", Bytes(static_cast<double>(in.private_pools_free)),
                  " of the reserved memory is free inside private pools (CUDA graphs or "
                  "torch.cuda.MemPool still alive), which only allocations into those pools "
                  "can use",
                  would_fit ? "; without it the request would have fit" : "",
                  ". A graph kept alive keeps its pool: drop the graphs no longer replayed, "
                  "or capture them into one shared pool (torch.cuda.graph(g, "
                  "pool=first_graph.pool()))\n");
}

// Pages larger than the 2 MiB granule (the default on large cards) hold a little more than
// the blocks need; where the request fit under the cap, finer pages may have found it room.
// Not for a leak: its fix is elsewhere.
void AppendPageNote(const OomVerdictInput& in, OomClass cls, std::string* out) {
  constexpr std::size_t kGranule = std::size_t{2} << 20;
  const report::OomFigures& f = in.figures;
  if (cls == OomClass::kLeak || !in.gpumem_allocator || in.page_bytes <= kGranule ||
      f.allocated + f.request > f.capacity) {
    return;
  }
  absl::StrAppend(out, "gpumem:   note: gpumem's pages are ", Bytes(in.page_bytes),
                  " (GPUMEM_PAGE_SIZE, by default a share of the card); with "
                  "GPUMEM_PAGE_SIZE=2M it packs tighter (runs that only just fit need ~0.5-1% "
                  "less), at the cost of more driver calls when it defragments\n");
}

}  // namespace

OomClass ClassifyDyingOom(const OomVerdictInput& in) {
  const OomClass cls = report::ClassifyOom(in.figures);
  return cls == OomClass::kHeldOutside && in.libraries.growth ? OomClass::kLeak : cls;
}

void CountAsFirstIteration(std::size_t calls, OomVerdictInput* in) {
  if (!in->figures.growth_suspected) return;
  in->figures.first_iteration_calls = calls;
  in->figures.finished_steps = 0;
}

std::string OomVerdictText(const OomVerdictInput& in, OomClass cls) {
  std::string out = absl::StrCat("gpumem: device ", in.device, ": out of memory: verdict: ",
                                 report::OomVerdictName(cls), "\n");
  absl::StrAppend(&out, "gpumem:   evidence: ", Evidence(in, cls), ".\n");
  if (!in.pass_start.empty()) {
    absl::StrAppend(&out, "gpumem:   passes: no step was marked (no optimizer step, backward "
                          "pass or model call), so each pass of the loop stands in for one; a "
                          "pass starts at each allocation from ", in.pass_start, "\n");
  }
  AppendOutside(in, &out);
  AppendPrivatePools(in, &out);
  AppendSites(in, &out);
  absl::StrAppend(&out, "gpumem:   fix: ", Fix(in, cls), "\n");
  if (in.figures.first_iteration_calls > 0 && cls == OomClass::kPeak) {
    absl::StrAppend(&out, "gpumem:   iteration: ", report::kFirstIterationFix, "\n");
  }
  if (cls == OomClass::kFragmentation && in.gpumem_allocator) {
    absl::StrAppend(&out, "gpumem:   note: gpumem's allocator remaps idle pages and retries "
                          "before it fails, so fragmentation should not end a run under it "
                          "(GPUMEM_STITCH=0 turns that off); if it is on, please report this "
                          "with the trace\n");
  }
  AppendPageNote(in, cls, &out);
  if (!in.trace_path.empty()) {
    absl::StrAppend(&out, "gpumem:   trace: ", in.trace_path,
                    " (flushed with this OOM; `gpumem report ", in.trace_path, "`)\n");
  }
  return out;
}

std::string OutsideLeakLines(const LibraryHolding& lib) {
  if (!lib.growth) return "";
  return absl::StrCat("gpumem:   verdict: leak outside the allocator: ",
                      report::OutsideGrowthText(report::OutsideHolderName(lib.library, lib.site),
                                                lib.growth->bytes_per_step, lib.growth_steps),
                      " (", Bytes(static_cast<double>(lib.bytes)), " now)\n",
                      "gpumem:   fix: ", report::OutsideLeakFix(lib.library), "\n");
}

}  // namespace gpumem
