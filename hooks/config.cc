#include "hooks/config.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "profiler/trace_max.h"

namespace gpumem::hooks {

const ConfigVariable kConfigVariables[] = {
    {"GPUMEM", "0, 1", "1: install gpumem in every Python process that imports torch "
                       "(through gpumem's sitecustomize on PYTHONPATH; `gpumem run` sets it)"},
    {"GPUMEM_MODE", "allocator, profile",
     "allocator (default): gpumem is PyTorch's CUDA allocator; profile: PyTorch keeps its "
     "own caching allocator and gpumem records its allocations, frees and segments with "
     "stacks into the trace (GPUMEM_TRACE, default gpumem-%p.gpumem, per rank "
     "gpumem-rank%r-%h-%p.gpumem; `gpumem run "
     "--profile-only`, gpumem.profile())"},
    {"GPUMEM_BACKEND", "auto, vmm, cudamalloc, sim",
     "device memory: CUDA virtual memory (pages that can be remapped), plain cudaMalloc "
     "segments, or a host simulation for tests; auto picks vmm where the device has it"},
    {"GPUMEM_CAPACITY", "bytes: 123, 512M, 1.5G, 80GiB (K/M/G/T = 1024^n)",
     "most device memory gpumem may hold per device; unset: the whole device"},
    {"GPUMEM_MEMORY_FRACTION", "a number in (0, 1]",
     "cap as a share of the device's memory (like torch.cuda.set_per_process_memory_fraction)"},
    {"GPUMEM_HEADROOM", "bytes: 0, 256M, 1G (K/M/G/T = 1024^n)",
     "device memory kept free for libraries that allocate outside gpumem (cuBLAS, cuDNN, "
     "NCCL, cuFFT): idle pages are given back before growth would leave less; default "
     "512M (0 on the sim backend); 0: off"},
    {"GPUMEM_TRACE", "a file path", "record every allocation to this gpumem trace file"},
    {"GPUMEM_TRACE_MAX", "bytes: 256M, 2G (K/M/G/T = 1024^n), at least 16M",
     "keep the trace within this size on disk (plus a stated margin): a ring of 8 segment "
     "files, each starting with the blocks then live and their stacks, the oldest deleted, "
     "so a long run records all the time and its last hours name every live block; the "
     "CUPTI tracer's companion (NAME.cupti.gpumem) is a ring of its own within a sixteenth "
     "of this size, at least 16M, on top of it; unset: files that grow"},
    {"GPUMEM_STITCH", "0, 1",
     "1 (default): before creating pages, remap idle pages into the range that needs "
     "them (defragmentation); 0: create new pages, reclaim idle ones only when full"},
    {"GPUMEM_PAGE_SIZE", "auto, or a size from 2M to 1G, such as 2M or 8M",
     "the unit in which device memory is created and mapped, rounded up to the device's "
     "granularity (2 MiB on NVIDIA GPUs): each page costs the same driver calls whatever "
     "its size, so larger pages make growth and stitching cheaper and waste more at the "
     "end of each range and under a cap; auto (default): 1/8192 of the device's cap as a "
     "power of two, from 2 MiB to 8 MiB (8 MiB on an 80 GB card; 2 MiB without VMM)"},
    {"GPUMEM_BORROW", "0, 1",
     "1 (default): a large request its stream's own cache cannot fit takes another "
     "stream's free block where it is, the stream waiting on the device for the other's "
     "work (FSDP2's communication streams then remap nothing); 0: each stream grows its own"},
    {"GPUMEM_MEDIUM_HEAP", "0, 1",
     "1 (default): blocks above 64 KiB and up to 1 MiB (PyTorch's small-pool limit) come "
     "from a heap of their own per stream, so that such blocks kept while large ones come "
     "and go do not pin the large ones' pages; 0: one heap a stream for all but the "
     "smallest blocks"},
    {"GPUMEM_BACKGROUND_UNMAP", "0, 1",
     "1 (default): the old addresses of pages that stitching moved are unmapped on a "
     "thread of gpumem's own once the device is done with them; 0: on the allocating "
     "thread, at its next growth"},
    {"GPUMEM_THREAD_CACHE", "0, 1",
     "1 (default): once threads keep contending for the allocator's lock, each thread "
     "reuses blocks it freed without taking it (off while GPUMEM_TRACE records); 0: every "
     "call takes the lock"},
    {"GPUMEM_LOG_OOM", "0, 1",
     "1 (default): at an out-of-memory, print its figures and the verdict (leak, "
     "fragmentation or genuine peak, the top live sites with their growth per step when "
     "GPUMEM_TRACE records, the fix) to stderr"},
    {"GPUMEM_LEAK_WARN_STEPS", "0, 1, 2, ... (at most 31 used)",
     "while a trace records: one stderr line when a site's live memory has risen at this "
     "many step ends in a row (default 5), with its growth per step and the step at which "
     "the cap would be reached; repeated only when that projection moves; 0: off"},
    {"GPUMEM_VERBOSE", "0, 1",
     "1: print each device's backend and cap when it starts, and the recorder's own time "
     "when a trace closes"},
};
const int kConfigVariableCount = sizeof(kConfigVariables) / sizeof(kConfigVariables[0]);

namespace {

absl::Status Invalid(const char* name, absl::string_view value, absl::string_view accepted) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, "='", value, "': expected ", accepted));
}

absl::StatusOr<bool> ParseFlag(const char* name, absl::string_view value) {
  if (value == "1") return true;
  if (value == "0") return false;
  return Invalid(name, value, "0 or 1");
}

// The variable's value, or null where it is unset or empty.
const char* Given(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

absl::Status ParseChoices(const EnvLookup& env, Config* config) {
  if (const char* v = Given(env, "GPUMEM_MODE")) {
    absl::string_view s = v;
    if (s == "allocator") config->mode = Mode::kAllocator;
    else if (s == "profile") config->mode = Mode::kProfile;
    else return Invalid("GPUMEM_MODE", s, "allocator or profile");
  }
  if (const char* v = Given(env, "GPUMEM_BACKEND")) {
    absl::string_view s = v;
    if (s == "auto") config->backend = BackendKind::kAuto;
    else if (s == "vmm") config->backend = BackendKind::kVmm;
    else if (s == "cudamalloc") config->backend = BackendKind::kCudaMalloc;
    else if (s == "sim") config->backend = BackendKind::kSim;
    else return Invalid("GPUMEM_BACKEND", s, "auto, vmm, cudamalloc or sim");
  }
  return absl::OkStatus();
}

// The cap, the headroom and the page: how much device memory, in what units.
absl::Status ParseSizes(const EnvLookup& env, Config* config) {
  if (const char* v = Given(env, "GPUMEM_CAPACITY")) {
    absl::StatusOr<std::uint64_t> bytes = ParseBytes(v);
    if (!bytes.ok()) {
      return Invalid("GPUMEM_CAPACITY", v, "a positive size such as 123, 512M, 1.5G or 80GiB");
    }
    config->capacity = *bytes;
  }
  if (const char* v = Given(env, "GPUMEM_MEMORY_FRACTION")) {
    double f = 0;
    if (!absl::SimpleAtod(v, &f) || !(f > 0.0 && f <= 1.0)) {
      return Invalid("GPUMEM_MEMORY_FRACTION", v, "a number in (0, 1]");
    }
    config->memory_fraction = f;
  }
  if (const char* v = Given(env, "GPUMEM_HEADROOM")) {
    absl::StatusOr<std::uint64_t> bytes = absl::string_view(v) == "0" ? 0 : ParseBytes(v);
    if (!bytes.ok()) return Invalid("GPUMEM_HEADROOM", v, "0 or a size such as 256M or 1G");
    config->headroom = *bytes;
  }
  if (const char* v = Given(env, "GPUMEM_PAGE_SIZE"); v != nullptr && absl::string_view(v) != "auto") {
    absl::StatusOr<std::uint64_t> bytes = ParseBytes(v);
    if (!bytes.ok() || *bytes < (std::uint64_t{2} << 20) || *bytes > (std::uint64_t{1} << 30)) {
      return Invalid("GPUMEM_PAGE_SIZE", v, "auto or a size from 2M to 1G, such as 4M");
    }
    config->page_bytes = *bytes;
  }
  return absl::OkStatus();
}

absl::Status ParseRecording(const EnvLookup& env, Config* config) {
  if (const char* v = env("GPUMEM_TRACE"); v != nullptr) config->trace_path = v;
  absl::StatusOr<std::uint64_t> trace_max = ParseTraceMax(env(kTraceMaxVariable));
  if (!trace_max.ok()) return trace_max.status();
  config->trace_max_bytes = *trace_max;
  if (const char* v = Given(env, "GPUMEM_LEAK_WARN_STEPS")) {
    int steps = 0;
    if (!absl::SimpleAtoi(v, &steps) || steps < 0) {
      return Invalid("GPUMEM_LEAK_WARN_STEPS", v, "0 (off) or a number of steps");
    }
    config->leak_warn_steps = static_cast<std::size_t>(steps);
  }
  return absl::OkStatus();
}

absl::Status ParseFlags(const EnvLookup& env, Config* config) {
  bool on = true;  // GPUMEM itself is read by the preload; here it is only checked
  const std::pair<const char*, bool*> flags[] = {
      {"GPUMEM_LOG_OOM", &config->log_oom},
      {"GPUMEM_STITCH", &config->stitch},
      {"GPUMEM_BORROW", &config->borrow},
      {"GPUMEM_MEDIUM_HEAP", &config->medium_heap},
      {"GPUMEM_BACKGROUND_UNMAP", &config->background_unmap},
      {"GPUMEM_THREAD_CACHE", &config->thread_cache},
      {"GPUMEM_VERBOSE", &config->verbose},
      {"GPUMEM", &on},
  };
  for (const auto& [name, field] : flags) {
    if (const char* v = Given(env, name)) {
      absl::StatusOr<bool> b = ParseFlag(name, v);
      if (!b.ok()) return b.status();
      *field = *b;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Config> ParseConfig(const EnvLookup& env) {
  Config config;
  for (auto parse : {ParseChoices, ParseSizes, ParseRecording, ParseFlags}) {
    if (absl::Status parsed = parse(env, &config); !parsed.ok()) return parsed;
  }
  return config;
}

std::uint64_t HeadroomFor(const Config& config, bool simulated) {
  if (config.headroom) return *config.headroom;
  return simulated ? 0 : kDefaultHeadroom;
}

absl::StatusOr<Config> ParseConfigFromEnvironment() {
  return ParseConfig([](const char* name) { return std::getenv(name); });
}

}  // namespace gpumem::hooks
