#include "tools/report/verdict_rules.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gpumem::report {
namespace {

constexpr char kLeakFix[] =
    "Find what keeps the suspect's tensors alive from one step to the next: keep numbers, "
    "not tensors (loss.item() instead of appending the loss), detach() what is kept for "
    "logging, del references you no longer need, and run evaluation under "
    "torch.no_grad(). torch.cuda.empty_cache() does not cure a leak: the memory is still "
    "referenced.";
constexpr char kFragmentationFix[] =
    "The memory exists but is cut into pieces: run with gpumem's allocator (it maps "
    "free pages into one range instead of needing a contiguous piece), or set "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; allocating the largest, "
    "longest-lived tensors first also helps.";
constexpr char kPeakFix[] =
    "The step genuinely needs more memory than the device has: use a smaller batch "
    "(with gradient accumulation to keep the effective batch), activation checkpointing, "
    "mixed precision (bf16/fp16 autocast), or shard optimizer state and parameters "
    "across devices (FSDP / ZeRO).";

constexpr char kHeldApartFix[] =
    "Free memory was there in pieces large enough, but held apart from this request: "
    "the free blocks of private pools (CUDA graphs, torch.cuda.MemPool) whose owners are "
    "still alive, or, under PyTorch's allocator, blocks cached for another stream. A "
    "graph kept alive keeps its whole pool: drop the graphs no longer replayed (and the "
    "outputs that refer to them), or capture them into one shared pool "
    "(torch.cuda.graph(g, pool=first_graph.pool())).";

// Memory held outside by other processes, by this process's libraries, or by either
// (who held it unknown, or both).
constexpr char kHeldByProcessesFix[] =
    "The device was full of memory other processes held. Run where the GPU is yours "
    "(nvidia-smi shows who holds it; CUDA_VISIBLE_DEVICES picks another); if it is this "
    "job's own (a DataLoader worker or another rank that made a CUDA context here), call "
    "torch.cuda.set_device(local_rank) before the first CUDA call and keep CUDA out of "
    "workers.";
constexpr char kHeldByLibrariesFix[] =
    "The device was full of memory a library of this process held outside the allocator "
    "(a CUDA extension's cudaMalloc, CuPy's or another framework's memory pool): free what "
    "it holds (CuPy: cupy.get_default_memory_pool().free_all_blocks()), have it allocate "
    "through PyTorch, and if it grows from step to step, find what it never frees.";
constexpr char kHeldOutsideFix[] =
    "The device was full of memory this allocator does not hold. Another process on the "
    "GPU: run where the GPU is yours (nvidia-smi shows who holds it; CUDA_VISIBLE_DEVICES "
    "picks another); if it is this job's own (a DataLoader worker or another rank that "
    "made a CUDA context here), call torch.cuda.set_device(local_rank) before the first "
    "CUDA call and keep CUDA out of workers. A library of this process (a CUDA "
    "extension's cudaMalloc, CuPy's or another framework's memory pool): free what it "
    "holds (CuPy: cupy.get_default_memory_pool().free_all_blocks()), have it allocate "
    "through PyTorch, and if it grows from step to step, find what it never frees.";

// A site grows steadily: a good straight-line fit, rising at most step ends, and by an
// amount that matters (MinLeakGrowth).
constexpr double kMinR2 = 0.8;
constexpr double kMinRisingShare = 0.7;
constexpr double kMinGrowthShareOfPeak = 0.005;
constexpr std::uint64_t kMinGrowthBytes = 1 << 20;
// A leak that keeps something every few steps (a sample every tenth step) rises at few
// step ends and falls at none: a staircase. It passes with a straighter fit, falls at
// hardly any step end, and rises in every quarter of the window, twice or more, so that a
// few one-off allocations (a copy of the model made once, a cache filling up, a buffer
// grown for the longest batch so far) do not pass.
constexpr double kMinStairR2 = 0.9;
constexpr double kMinZigZagFallingShare = 0.3;
constexpr double kMaxStairFallingShare = 0.05;
constexpr std::size_t kMinStairRisesPerQuarter = 2;

// The share of samples above the one `stride` before.
double RisingShare(absl::Span<const std::uint64_t> live, std::size_t stride) {
  if (live.size() <= stride) return 0;
  std::size_t rising = 0;
  for (std::size_t j = stride; j < live.size(); ++j) rising += live[j] > live[j - stride];
  return static_cast<double>(rising) / static_cast<double>(live.size() - stride);
}

// The share of samples below the one before.
double FallingShare(absl::Span<const std::uint64_t> live) {
  if (live.size() < 2) return 0;
  std::size_t falling = 0;
  for (std::size_t j = 1; j < live.size(); ++j) falling += live[j] < live[j - 1];
  return static_cast<double>(falling) / static_cast<double>(live.size() - 1);
}

bool RisesLikeStairs(absl::Span<const std::uint64_t> live) {
  const std::size_t changes = live.size() - 1;
  if (FallingShare(live) > kMaxStairFallingShare) return false;
  for (std::size_t quarter = 0; quarter < 4; ++quarter) {
    std::size_t rises = 0;
    for (std::size_t j = 1 + changes * quarter / 4; j < 1 + changes * (quarter + 1) / 4; ++j) {
      rises += live[j] > live[j - 1];
    }
    if (rises < kMinStairRisesPerQuarter) return false;
  }
  return true;
}

}  // namespace

const char* OomClassName(OomClass c) {
  switch (c) {
    case OomClass::kLeak: return "leak";
    case OomClass::kFragmentation: return "fragmentation";
    case OomClass::kPeak: return "peak";
    case OomClass::kHeldApart: return "held apart";
    case OomClass::kHeldOutside: return "held outside";
  }
  return "peak";
}

std::string FirstIterationGrowth(std::size_t calls) {
  return absl::StrCat("no iteration had finished: the model was called ", calls,
                      " times with grad and no backward pass yet, and each call's graph "
                      "waits for that backward");
}

const char* OomVerdictName(OomClass c) {
  switch (c) {
    case OomClass::kPeak: return "genuine peak";
    case OomClass::kHeldApart: return "free memory held apart";
    case OomClass::kHeldOutside: return "memory held outside the allocator";
    default: return OomClassName(c);
  }
}

std::string SiteWithCall(absl::string_view site, absl::string_view call) {
  if (call.empty()) return std::string(site);
  return absl::StrCat(site, ", called from ", call);
}

const char* const kGraphPoolLeakFix =
    "The growing site captures CUDA graphs that stay alive (kept in a dict, a list or an "
    "object that lives on): each keeps its whole memory pool, free or not, for as long as "
    "it lives. Drop the graphs no longer replayed (and the outputs that refer to them), "
    "keep one graph per input shape, or capture them into one shared pool "
    "(torch.cuda.graph(g, pool=first_graph.pool())). A module graphed by "
    "make_graphed_callables refers to itself: one dropped is freed only by the cycle "
    "collector, so graph it once, or call gc.collect() after dropping it.";

const char* OutsideLeakFix(OutsideLibrary library) {
  if (library == OutsideLibrary::kNccl) {
    return "NCCL's memory grows by a communicator's buffers every step: a process group is "
           "made and never destroyed (dist.new_group, new_subgroups or a DeviceMesh built "
           "inside the loop or in a helper it calls): make process groups once, before "
           "training, and pass them in; call dist.destroy_process_group(group) for one "
           "you are done with.";
  }
  return "A library of this process takes device memory from the driver every step and "
         "keeps it, outside PyTorch's allocator (a CUDA extension's cudaMalloc or cuMemAlloc "
         "without its free, another framework's pool that grows): free what it allocates "
         "once done with it (or reuse one buffer), or allocate through PyTorch (torch.empty) "
         "so that the allocator and its tools see it.";
}

const char* OutsideLeakCause(OutsideLibrary library) {
  return library == OutsideLibrary::kNccl
             ? "a process group made every step and never destroyed keeps an NCCL "
               "communicator's buffers on the device"
             : "a library of this process took device memory from the driver every step and "
               "kept it";
}

std::string OutsideHolderName(OutsideLibrary library, absl::string_view site) {
  if (library == OutsideLibrary::kOther) return std::string(site);
  return absl::StrCat(OutsideLibraryName(library), "'s memory",
                      site.empty() ? "" : absl::StrCat(" for ", site));
}

const char* const kHelperKeptFix =
    "A thread other than the training loop's puts tensors on the device faster than the "
    "loop takes them (a prefetch queue without a bound, a cache a loader fills): bound the "
    "queue (queue.Queue(maxsize=2)) so the thread waits for the loop, or copy each batch "
    "to the device on the loop's thread when it is taken.";

std::string HelperKeptText(const HelperKept& kept, absl::string_view site) {
  return absl::StrCat("a thread other than the loop's kept ", kept.blocks, " blocks (",
                      Bytes(static_cast<double>(kept.bytes)), ") at ", site,
                      ", which the loop had not taken");
}

std::string GrowthHeldIn(bool growth_in_graph_pools, std::uint64_t allocated) {
  if (growth_in_graph_pools) return " held by blocks and CUDA graph pools";
  return absl::StrCat(" of the ", Bytes(static_cast<double>(allocated)), " allocated");
}

const char* OomFix(OomClass c, bool growth_in_graph_pools) {
  if (c == OomClass::kLeak && growth_in_graph_pools) return kGraphPoolLeakFix;
  switch (c) {
    case OomClass::kLeak: return kLeakFix;
    case OomClass::kFragmentation: return kFragmentationFix;
    case OomClass::kPeak: return kPeakFix;
    case OomClass::kHeldApart: return kHeldApartFix;
    case OomClass::kHeldOutside: return kHeldOutsideFix;
  }
  return kPeakFix;
}

const char* HeldOutsideFix(std::uint64_t other_processes, std::uint64_t libraries) {
  if (other_processes > 0 && libraries == 0) return kHeldByProcessesFix;
  if (libraries > 0 && other_processes == 0) return kHeldByLibrariesFix;
  return kHeldOutsideFix;
}

LinearFit FitLine(absl::Span<const double> x, absl::Span<const double> y) {
  LinearFit fit;
  const double n = static_cast<double>(x.size());
  if (x.size() < 2) return fit;
  double mx = 0, my = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    mx += x[i];
    my += y[i];
  }
  mx /= n;
  my /= n;
  double sxx = 0, sxy = 0, syy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sxx += (x[i] - mx) * (x[i] - mx);
    sxy += (x[i] - mx) * (y[i] - my);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx == 0) return fit;
  fit.slope = sxy / sxx;
  fit.intercept = my - fit.slope * mx;
  fit.r2 = syy == 0 ? 0 : (sxy * sxy) / (sxx * syy);
  return fit;
}

double MinLeakGrowth(std::uint64_t peak_allocated) {
  return std::max<double>(kMinGrowthBytes,
                          kMinGrowthShareOfPeak * static_cast<double>(peak_allocated));
}

std::optional<Growth> SteadyGrowth(absl::Span<const double> steps,
                                   absl::Span<const std::uint64_t> live, double min_growth) {
  if (live.size() < kMinGrowthSamples || live.size() != steps.size() ||
      live.back() <= live.front()) {
    return std::nullopt;
  }
  Growth g;
  g.grown = live.back() - live.front();
  if (static_cast<double>(g.grown) < min_growth) return std::nullopt;
  std::vector<double> y;
  for (std::uint64_t v : live) y.push_back(static_cast<double>(v));
  g.rising_share = RisingShare(live, 1);
  const LinearFit fit = FitLine(steps, y);
  g.bytes_per_step = fit.slope;
  g.r2 = fit.r2;
  if (fit.slope <= 0) return std::nullopt;
  // A loop of two phases, each ending a step (a GAN's two optimizers), holds what it keeps
  // at alternate step ends: the series zig-zags up, falling at about every other step end
  // and rising from each to the one two later. (A series that never falls is judged as
  // it was: rises two steps apart alone would pass a staircase on too few samples.)
  const bool zig_zag = FallingShare(live) >= kMinZigZagFallingShare &&
                       RisingShare(live, 2) >= kMinRisingShare;
  const bool steady = fit.r2 >= kMinR2 && (g.rising_share >= kMinRisingShare || zig_zag);
  if (!steady && !(fit.r2 >= kMinStairR2 && RisesLikeStairs(live))) return std::nullopt;
  return g;
}

void FillLevel::Add(std::uint64_t live) {
  if (live > most_) {
    most_ = live;
    least_since_most_ = UINT64_MAX;
  } else {
    least_since_most_ = std::min(least_since_most_, live);
  }
}

bool FillLevel::Refills(std::uint64_t start, std::uint64_t now) const {
  if (least_since_most_ > start || most_ <= start) return false;
  return now <= most_ + (most_ - start) / 8;
}

std::optional<Growth> RecentSteadyGrowth(absl::Span<const double> steps,
                                         absl::Span<const std::uint64_t> live,
                                         double min_growth, const FillLevel* fill) {
  const std::size_t n = std::min(steps.size(), live.size());
  FillLevel own;
  if (fill == nullptr) {
    for (std::size_t i = 0; i < n; ++i) own.Add(live[i]);
    fill = &own;
  }
  auto grows_from = [&](std::size_t from) -> std::optional<Growth> {
    std::optional<Growth> g = SteadyGrowth(steps.subspan(from, n - from),
                                           live.subspan(from, n - from), min_growth);
    if (!g || fill->Refills(live[from], live[n - 1])) return std::nullopt;
    g->from = from;
    return g;
  };
  if (std::optional<Growth> whole = grows_from(0)) return whole;
  for (std::size_t window = n / 2; window >= kMinLateGrowthSamples; window /= 2) {
    if (std::optional<Growth> g = grows_from(n - window)) return g;
  }
  return std::nullopt;
}

namespace {
// Whether the request would have fit had `bytes` of what was allocated not been held.
bool FitsWithout(const OomFigures& f, std::uint64_t bytes) {
  const std::uint64_t need = f.allocated + f.request;
  return need - std::min(need, bytes) <= f.capacity;
}
}  // namespace

bool HelperKeptExplains(const OomFigures& f) {
  return f.finished_steps < kMinStepsForLeak && f.helper_kept_bytes > 0 &&
         FitsWithout(f, f.helper_kept_bytes);
}

bool HeldOutsideExplains(const OomFigures& f) {
  const std::uint64_t need = f.request + f.headroom;
  if (!f.device_free || *f.device_free >= need || f.held_outside == 0) return false;
  const bool under_the_cap = !f.capacity_known || f.allocated + f.request <= f.capacity;
  return under_the_cap && *f.device_free + f.held_outside >= need;
}

std::string HeldOutsideRoomText(const OomFigures& f) {
  const std::string budget =
      f.capacity_known ? absl::StrCat("was under the cap of ", Bytes(f.capacity), " (allocated ",
                                      Bytes(f.allocated), ")")
                       : std::string("needed memory from the driver");
  const std::string headroom =
      f.headroom == 0 ? std::string()
                      : absl::StrCat(" (gpumem keeps ", Bytes(f.headroom),
                                     " free for other libraries)");
  return absl::StrCat("the request of ", Bytes(f.request), " ", budget, ", but the driver had ",
                      Bytes(f.device_free.value_or(0)), " free", headroom);
}

std::string HeldOutsideHolders(std::uint64_t other_processes, absl::string_view processes,
                               std::uint64_t libraries, absl::string_view library_site) {
  std::vector<std::string> parts;
  if (other_processes > 0) {
    parts.push_back(absl::StrCat("other processes held ",
                                 Bytes(static_cast<double>(other_processes)), " (", processes,
                                 ")"));
  }
  if (libraries > 0) {
    parts.push_back(absl::StrCat(
        "libraries of this process other than the allocator, NCCL, cuBLAS and cuDNN held ",
        Bytes(static_cast<double>(libraries)),
        library_site.empty() ? "" : absl::StrCat(", most of it from ", library_site)));
  }
  return absl::StrJoin(parts, ", and ");
}

namespace {
constexpr absl::string_view kWouldHaveFit = ". Without that memory the request would have fit";
}  // namespace

std::string HeldOutsideText(const OomFigures& f, absl::string_view holders) {
  return absl::StrCat(HeldOutsideRoomText(f), ": ", holders, kWouldHaveFit);
}

std::string OutsideGrowthText(absl::string_view holder, double bytes_per_step,
                              std::size_t step_ends) {
  return absl::StrCat(holder, " took ", Bytes(bytes_per_step),
                      " per step from the driver and kept it, over the last ", step_ends,
                      " step ends");
}

std::string OutsideLeakText(absl::string_view holder, double bytes_per_step,
                            std::size_t step_ends, std::uint64_t held, const OomFigures& f) {
  return absl::StrCat("memory held outside the allocator grew: ",
                      OutsideGrowthText(holder, bytes_per_step, step_ends), " (",
                      Bytes(static_cast<double>(held)), " at the OOM); ",
                      HeldOutsideRoomText(f), kWouldHaveFit);
}

std::string LeakRequestText(const OomFigures& f, absl::string_view requester) {
  if (!f.request_from_grower || FitsWithout(f, f.grown_bytes)) {
    return absl::StrCat("without it the request of ", Bytes(f.request),
                        " would have fit in the cap of ", Bytes(f.capacity));
  }
  return absl::StrCat("the request of ", Bytes(f.request), " was made by ", requester,
                      " for what it keeps, which grows with it");
}

std::string LeakCutShortText(const OomFigures& f, double bytes_per_step, absl::string_view unit,
                             absl::string_view units) {
  // As ClassifyOom reads it: cached memory that could not serve the request was in pieces.
  const bool in_pieces = f.free_cached >= f.request && f.largest_free.value_or(0) < f.request;
  constexpr std::uint64_t kShareOfCap = 20;  // 5%: a share worth the user's attention
  if (!in_pieces || bytes_per_step <= 0 || f.free_cached * kShareOfCap < f.capacity) return "";
  const auto early = static_cast<std::uint64_t>(static_cast<double>(f.free_cached) / bytes_per_step);
  if (early == 0) return "";  // less than a step's growth: the pieces changed nothing
  const std::string pieces = f.largest_free
                                 ? absl::StrCat("in pieces of at most ", Bytes(*f.largest_free))
                                 : std::string("in pieces too small for the request");
  return absl::StrCat("; the cache also held ", Bytes(f.free_cached), " free, ", pieces,
                      " (fragmentation), which brought this OOM about ", early, " ",
                      early == 1 ? unit : units, " early");
}

OomClass ClassifyOom(const OomFigures& f) {
  const bool growth_explains = f.growth_suspected && f.grown_bytes > 0 &&
                               (FitsWithout(f, f.grown_bytes) || f.request_from_grower);
  if (growth_explains && f.finished_steps >= kMinStepsForLeak) return OomClass::kLeak;
  if (HelperKeptExplains(f)) return OomClass::kLeak;
  if (HeldOutsideExplains(f)) return OomClass::kHeldOutside;
  // Pieces too small only brought the end of an iteration too large a few calls closer.
  if (growth_explains && f.first_iteration_calls > 0) return OomClass::kPeak;
  // Without the largest piece, enough cached memory that the allocator could not use
  // means it was in pieces too small.
  if (f.free_cached >= f.request && f.largest_free.value_or(0) < f.request) {
    return OomClass::kFragmentation;
  }
  // A piece that would have served it, under the cap: the allocator could not use it.
  if (f.free_cached >= f.request && f.largest_free && f.allocated + f.request <= f.capacity) {
    return OomClass::kHeldApart;
  }
  return OomClass::kPeak;
}

// The module torch.compile's Inductor writes for a graph and runs: <cache>/xy/cxy<49>.py,
// named by its hash (c and 51 base32 characters), the folder by the hash's next two. The
// cache may be anywhere (TORCHINDUCTOR_CACHE_DIR), so the name is what tells.
bool IsInductorOutputCode(absl::string_view file) {
  constexpr absl::string_view kSuffix = ".py";
  constexpr std::size_t kHash = 52;
  if (!absl::ConsumeSuffix(&file, kSuffix) || file.size() < kHash + 4) return false;
  const absl::string_view hash = file.substr(file.size() - kHash);
  const absl::string_view folder = file.substr(file.size() - kHash - 4, 4);  // "/xy/"
  const bool base32 = absl::c_all_of(
      hash, [](char c) { return absl::ascii_islower(c) || absl::ascii_isdigit(c); });
  return base32 && hash[0] == 'c' && folder[0] == '/' && folder[3] == '/' &&
         folder.substr(1, 2) == hash.substr(1, 2);
}

namespace {

// The interpreter's own binary, which native stacks run through between a library and
// the Python frames: "python", then a version ("3", "3.11") and ABI letters ("3.13t",
// "3.11d"), and Debian's "-dbg" build; nothing else ("python_sim" is someone's program).
bool IsPythonInterpreter(absl::string_view file) {
  const std::size_t slash = file.rfind('/');
  absl::string_view rest = slash == absl::string_view::npos ? file : file.substr(slash + 1);
  if (!absl::ConsumePrefix(&rest, "python")) return false;
  absl::ConsumeSuffix(&rest, "-dbg");
  while (!rest.empty() && (absl::ascii_isdigit(rest.front()) || rest.front() == '.')) {
    rest.remove_prefix(1);
  }
  return rest.find_first_not_of("dmtu") == absl::string_view::npos && rest.size() <= 2;
}

}  // namespace

bool IsLibraryFile(absl::string_view file) {
  // "??": a native frame whose file the symbolizer could not find (PyTorch snapshots
  // recorded with C++ stacks, its default, are full of them).
  if (file.empty() || file == "??") return true;
  if (IsInductorOutputCode(file)) return true;
  // Installed packages (torch, transformers, ...), the stdlib, and interpreter internals.
  static constexpr absl::string_view kLibraryMarks[] = {
      "site-packages/", "dist-packages/", "/lib/python", "<frozen", "/torch/",
      "/c10/",          "/aten/",         "/usr/include/", "/usr/lib/"};
  for (absl::string_view mark : kLibraryMarks) {
    if (absl::StrContains(file, mark)) return true;
  }
  // gpumem's own Python package run from a checkout: its wrappers around graph captures.
  if (absl::StrContains(file, "gpumem/_")) return true;
  // The CUPTI tracer's API frames ("[cuda-driver]", "[cuda-runtime] via cuMemAlloc"): the
  // call, not who made it.
  if (absl::StartsWith(file, "[cuda-")) return true;
  // Code with no file is the interpreter's or generated (<frozen ...>, torch.fx's
  // <eval_with_key>.N), except what a user typed: IPython's cells and a script on stdin.
  if (absl::StartsWith(file, "<")) {
    return !absl::StartsWith(file, "<ipython-input-") && file != "<stdin>";
  }
  if (absl::StartsWith(file, "torch/")) return true;
  if (IsPythonInterpreter(file)) return true;
  // Native frames (gpumem traces carry them too): the allocator, libtorch, CUDA libraries.
  static constexpr absl::string_view kNativeSuffixes[] = {".so", ".cpp", ".cc", ".h",
                                                          ".hpp", ".cu", ".cuh", ".c"};
  for (absl::string_view suffix : kNativeSuffixes) {
    if (absl::EndsWith(file, suffix) || absl::StrContains(file, absl::StrCat(suffix, "."))) {
      return true;
    }
  }
  return false;
}

std::string Bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = bytes;
  while (std::fabs(v) >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f B", v) : absl::StrFormat("%.2f %s", v, units[u]);
}

std::string PidName(std::uint32_t pid) { return absl::StrCat("pid ", pid); }

std::string ProcessesText(std::vector<ProcessBytes> processes, std::size_t most,
                          absl::FunctionRef<std::string(std::uint32_t pid)> who) {
  std::stable_sort(processes.begin(), processes.end(),
                   [](const ProcessBytes& a, const ProcessBytes& b) { return a.bytes > b.bytes; });
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < processes.size() && i < most; ++i) {
    const double bytes = static_cast<double>(processes[i].bytes);
    parts.push_back(absl::StrCat(who(processes[i].pid), " ", Bytes(bytes)));
  }
  if (processes.size() > most) parts.push_back(absl::StrCat(processes.size() - most, " more"));
  return absl::StrJoin(parts, ", ");
}

}  // namespace gpumem::report
