// gpumem replay: real allocation traces through allocation policies on a simulated
// device, side by side.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "allocator/policies.h"
#include "allocator/sim_backend.h"
#include "nlohmann/json.hpp"
#include "tools/cli/command.h"
#include "tools/cli/damage_warning.h"
#include "tools/cli/loss_warning.h"
#include "tools/replay/min_cap.h"
#include "tools/replay/replayer.h"
#include "tools/replay/size_parser.h"
#include "tools/report/steps.h"
#include "tools/trace/load.h"
#include "tools/trace/unpaired_events.h"

namespace gpumem::cli {
namespace {

constexpr std::size_t kSlicesWithoutSteps = 10;

struct ReplayArgs {
  std::vector<std::string> traces;
  std::string policy = "all";
  std::string cap;
  bool min_cap = false;
  bool json = false;
  std::string addresses;
  std::size_t device_lag = 0;
  std::string page_size;
};

// --page-size: a whole number of the simulated device's granules, or empty (0: the
// granularity).
absl::StatusOr<std::size_t> ParsePageSize(const std::string& text) {
  if (text.empty()) return 0;
  absl::StatusOr<std::uint64_t> bytes = replay::ParseSize(text);
  if (!bytes.ok()) return bytes.status();
  const std::uint64_t granularity = SimBackendOptions{}.granularity;  // the replay's device
  if (*bytes == 0 || *bytes % granularity != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "' is ", *bytes, " bytes, not a whole number of ", granularity >> 20,
        " MiB granules (write 2MiB, 4MiB, 8MiB: M alone is 10^6)"));
  }
  return static_cast<std::size_t>(*bytes);
}

// Readable at every scale: 11.402 GiB, 16.00 MiB, 512 B.
std::string Gib(std::uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::uint64_t{1} << 30)) return absl::StrFormat("%.3f GiB", b / (1u << 30));
  if (bytes >= (std::uint64_t{1} << 20)) return absl::StrFormat("%.2f MiB", b / (1u << 20));
  if (bytes >= (std::uint64_t{1} << 10)) return absl::StrFormat("%.1f KiB", b / (1u << 10));
  return absl::StrFormat("%d B", bytes);
}

std::string OomText(const replay::ReplayResult& r) {
  if (!r.oom) return "none";
  const replay::ReplayOom& o = *r.oom;
  return absl::StrFormat(
      "at event %d: requested %s; allocated %s, reserved %s, largest free piece %s",
      o.event_index, Gib(o.requested_bytes), Gib(o.allocated_bytes), Gib(o.reserved_bytes),
      Gib(o.largest_free_bytes));
}

nlohmann::json ActivityJson(const replay::DeviceActivity& a) {
  return {{"maps", a.maps},
          {"unmaps", a.unmaps},
          {"synchronizes", a.synchronizes},
          {"stream_waits", a.stream_waits},
          {"physical_creates", a.physical_creates},
          {"segment_allocs", a.segment_allocs},
          {"segment_frees", a.segment_frees},
          {"stitches", a.stitches}};
}

std::string ActivityText(const replay::DeviceActivity& a) {
  return absl::StrFormat("maps %d, unmaps %d, synchronizes %d, stitches %d, new pages %d",
                         a.maps, a.unmaps, a.synchronizes, a.stitches,
                         a.physical_creates + a.segment_allocs);
}

nlohmann::json ToJson(const std::string& trace, const replay::ReplayResult& r) {
  nlohmann::json j;
  j["trace"] = trace;
  j["policy"] = r.policy;
  j["events"] = r.events;
  j["peak_allocated"] = r.peak_allocated;
  j["peak_reserved"] = r.peak_reserved;
  j["ratio"] = r.ratio;
  j["seconds"] = r.seconds;
  j["steps"] = r.steps.size();
  j["warmup_steps"] = r.warmup_steps;
  j["device_total"] = ActivityJson(r.total);
  j["device_steady"] = ActivityJson(r.steady);
  nlohmann::json per_step = nlohmann::json::array();
  for (const replay::DeviceActivity& a : r.steps) per_step.push_back(ActivityJson(a));
  j["device_per_step"] = std::move(per_step);
  if (r.oom) {
    j["oom"] = {{"event_index", r.oom->event_index},
                {"requested", r.oom->requested_bytes},
                {"allocated", r.oom->allocated_bytes},
                {"reserved", r.oom->reserved_bytes},
                {"largest_free", r.oom->largest_free_bytes}};
  } else {
    j["oom"] = nullptr;
  }
  return j;
}

void PrintTable(const std::string& trace, std::optional<std::uint64_t> capacity,
                const std::vector<replay::ReplayResult>& results) {
  if (capacity) {
    std::printf("%s (cap %s = %llu bytes)\n", trace.c_str(), Gib(*capacity).c_str(),
                static_cast<unsigned long long>(*capacity));
  } else {
    std::printf("%s\n", trace.c_str());
  }
  std::printf("  %-20s %10s %16s %16s %7s  %s\n", "policy", "events", "peak allocated",
              "peak reserved", "ratio", "OOM");
  for (const replay::ReplayResult& r : results) {
    std::printf("  %-20s %10zu %16s %16s %7.3f  %s\n", r.policy.c_str(), r.events,
                Gib(r.peak_allocated).c_str(), Gib(r.peak_reserved).c_str(), r.ratio,
                OomText(r).c_str());
  }
  for (const replay::ReplayResult& r : results) {
    std::printf("  %-20s device calls in steps %zu-%zu (after warm-up): %s; all %zu steps: %s\n",
                r.policy.c_str(), r.warmup_steps + 1, r.steps.size(),
                ActivityText(r.steady).c_str(), r.steps.size(), ActivityText(r.total).c_str());
  }
}

// What `gpumem report` says of the same trace (trace/unpaired_events.h), on stderr.
void WarnOfUnpaired(const replay::ReplayResult& r) {
  if (r.unmatched_frees > 0) {
    std::fprintf(stderr, "warning: %s\n", trace::UnmatchedFreesWarning(r.unmatched_frees).c_str());
  }
  if (r.reused_addresses > 0) {
    std::fprintf(stderr, "warning: %s\n", trace::ReusedAddressesWarning(r.reused_addresses).c_str());
  }
}

int BadInput(const std::string& message) { return cli::BadInput("replay", message); }

// --cap: bytes, a size with a unit, or "1.02x": a factor of each trace's peak allocated.
struct Cap {
  std::optional<std::uint64_t> bytes;
  std::optional<double> factor;
};

absl::StatusOr<Cap> ParseCap(const std::string& text) {
  Cap cap;
  if (text.empty()) return cap;
  if (text.back() == 'x' || text.back() == 'X') {
    double factor = 0;
    if (!absl::SimpleAtod(absl::string_view(text).substr(0, text.size() - 1), &factor) ||
        !(factor > 0) || !std::isfinite(factor)) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad factor '", text, "' (example: 1.02x, a factor of peak allocated)"));
    }
    cap.factor = factor;
    return cap;
  }
  absl::StatusOr<std::uint64_t> bytes = replay::ParseSize(text);
  if (!bytes.ok()) return bytes.status();
  if (*bytes == 0) return absl::InvalidArgumentError("the capacity must be more than 0 bytes");
  cap.bytes = *bytes;
  return cap;
}

// --min-cap: per policy, the smallest device that still replays the whole trace.
int PrintMinCap(const std::string& path, const trace::Trace& trace,
                const std::vector<std::string>& policies, const replay::ReplayOptions& options,
                bool json) {
  if (!json) {
    std::printf("%s\n  %-20s %16s %10s %16s %16s\n", path.c_str(), "policy", "smallest cap",
                "x peak", "OOM at", "uncapped");
  }
  for (const std::string& policy : policies) {
    absl::StatusOr<replay::MinCapResult> r = replay::FindMinCap(trace, policy, options);
    if (!r.ok()) return BadInput(std::string(r.status().message()));
    if (json) {
      nlohmann::json j = {{"trace", path},
                          {"policy", policy},
                          {"min_cap", r->min_cap},
                          {"failed_cap", r->failed_cap},
                          {"min_cap_ratio", r->ratio()},
                          {"peak_allocated", r->peak_allocated},
                          {"uncapped_reserved", r->uncapped_reserved},
                          {"replays", r->replays}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("  %-20s %16s %10.4f %16s %16s\n", policy.c_str(), Gib(r->min_cap).c_str(),
                  r->ratio(), r->failed_cap > 0 ? Gib(r->failed_cap).c_str() : "-",
                  Gib(r->uncapped_reserved).c_str());
    }
    std::fflush(stdout);
  }
  return kExitOk;
}

// --addresses: the replay's own observer writes where the policy put each block, for
// layout studies (tools/replay/obstacle_plan_bound.py).
struct AddressFile {
  std::FILE* file = nullptr;
  ~AddressFile() {
    if (file != nullptr) std::fclose(file);
  }
  replay::AllocObserver Observer(const trace::Trace& trace) {
    if (file == nullptr) return {};
    std::fprintf(file, "# event\ttrace_addr\taddr\tsize\n");
    return [this, &trace](std::size_t i, DevicePtr ptr) {
      const trace::Event& e = trace.events[i];
      std::fprintf(file, "%zu\t%llu\t%llu\t%llu\n", i,
                   static_cast<unsigned long long>(e.addr),
                   static_cast<unsigned long long>(ptr),
                   static_cast<unsigned long long>(e.size));
    };
  }
  // Whether everything written reached the file.
  bool Close() {
    const bool ok = file == nullptr || std::fclose(file) == 0;
    file = nullptr;
    return ok;
  }
};

// The policies that --policy names, or an error for the user.
absl::StatusOr<std::vector<std::string>> ChosenPolicies(const std::string& policy) {
  const std::vector<std::string> known = PolicyNames();
  if (policy == "all") return known;
  if (std::find(known.begin(), known.end(), policy) == known.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--policy: unknown policy '", policy, "'; known: ", absl::StrJoin(known, ", "), ", all"));
  }
  return std::vector<std::string>{policy};
}

// The arguments' contradictions, named (OK: none).
absl::Status CheckCombination(const ReplayArgs& args) {
  if (args.min_cap && !args.cap.empty()) {
    return absl::InvalidArgumentError("--min-cap searches the cap itself: leave out --cap");
  }
  if (!args.addresses.empty() &&
      (args.policy == "all" || args.traces.size() != 1 || args.min_cap)) {
    return absl::InvalidArgumentError(
        "--addresses needs one trace and one --policy, without --min-cap");
  }
  return absl::OkStatus();
}

// What one trace is replayed with: the cap (a factor of its peak, or bytes) and its steps.
absl::StatusOr<replay::ReplayOptions> OptionsFor(const trace::Trace& trace, const Cap& cap,
                                                 const ReplayArgs& args, std::size_t page_bytes) {
  replay::ReplayOptions options;
  options.capacity = cap.bytes;
  options.device_lag = args.device_lag;
  options.page_bytes = page_bytes;
  // Device activity is counted per training step: the trace's own (or inferred) steps,
  // else ten equal slices.
  options.step_ends = report::FindSteps(trace, std::nullopt).ends;
  if (options.step_ends.empty()) {
    options.step_ends = replay::EqualStepEnds(trace.events.size(), kSlicesWithoutSteps);
  }
  if (cap.factor) {
    options.capacity = static_cast<std::uint64_t>(
        *cap.factor * static_cast<double>(replay::PeakAllocated(trace)));
    if (*options.capacity == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(trace.source, ": --cap ", args.cap, " is 0 bytes"));
    }
  }
  return options;
}

// Every policy over one trace: a JSON line each, or one table.
int ReplayPolicies(const std::string& path, const trace::Trace& trace,
                   const std::vector<std::string>& policies,
                   const replay::ReplayOptions& options, const replay::AllocObserver& on_alloc,
                   bool json) {
  std::vector<replay::ReplayResult> results;
  for (const std::string& policy : policies) {
    absl::StatusOr<replay::ReplayResult> result =
        replay::Replay(trace, policy, options, on_alloc);
    if (!result.ok()) return BadInput(std::string(result.status().message()));
    if (&policy == &policies.front()) WarnOfUnpaired(*result);
    if (json) {
      nlohmann::json j = ToJson(path, *result);
      j["capacity"] = options.capacity ? nlohmann::json(*options.capacity) : nlohmann::json();
      std::printf("%s\n", j.dump().c_str());
    } else {
      results.push_back(*std::move(result));
    }
  }
  if (!json) PrintTable(path, options.capacity, results);
  std::fflush(stdout);
  return kExitOk;
}

int ReplayTrace(const std::string& path, const ReplayArgs& args,
                const std::vector<std::string>& policies, const Cap& cap,
                std::size_t page_bytes) {
  absl::StatusOr<trace::Trace> trace = trace::LoadTrace(path);
  if (!trace.ok()) return BadInput(std::string(trace.status().message()));
  WarnOfLoss(*trace);
  WarnOfDamage(*trace);
  absl::StatusOr<replay::ReplayOptions> options = OptionsFor(*trace, cap, args, page_bytes);
  if (!options.ok()) return BadInput(std::string(options.status().message()));
  if (args.min_cap) return PrintMinCap(path, *trace, policies, *options, args.json);
  AddressFile addresses;
  if (!args.addresses.empty()) {
    addresses.file = std::fopen(args.addresses.c_str(), "w");
    if (addresses.file == nullptr) {
      return BadInput(absl::StrCat("--addresses: cannot write ", args.addresses));
    }
  }
  const int status =
      ReplayPolicies(path, *trace, policies, *options, addresses.Observer(*trace), args.json);
  if (!addresses.Close() && status == kExitOk) {
    return BadInput(absl::StrCat("--addresses: cannot write ", args.addresses));
  }
  return status;
}

int RunReplay(const ReplayArgs& args) {
  absl::StatusOr<Cap> cap = ParseCap(args.cap);
  if (!cap.ok()) return BadInput(absl::StrCat("--cap: ", cap.status().message()));
  absl::StatusOr<std::size_t> page_bytes = ParsePageSize(args.page_size);
  if (!page_bytes.ok()) {
    return BadInput(absl::StrCat("--page-size: ", page_bytes.status().message()));
  }
  if (absl::Status combined = CheckCombination(args); !combined.ok()) {
    return BadInput(std::string(combined.message()));
  }
  absl::StatusOr<std::vector<std::string>> policies = ChosenPolicies(args.policy);
  if (!policies.ok()) return BadInput(std::string(policies.status().message()));
  for (const std::string& path : args.traces) {
    if (int status = ReplayTrace(path, args, *policies, *cap, *page_bytes); status != kExitOk) {
      return status;
    }
  }
  return kExitOk;
}

}  // namespace

void AddReplayCommand(CLI::App& app, int* status) {
  auto args = std::make_shared<ReplayArgs>();
  CLI::App* cmd = app.add_subcommand(
      "replay",
      "Replay allocation traces through allocation policies on a simulated device and compare\n"
      "what each would reserve. The denominator of every ratio is the same: the peak of the\n"
      "sizes the trace's own alloc events hold live at once. Traces: gpumem traces, PyTorch\n"
      "memory snapshots (torch.cuda.memory._snapshot() pickled; plain, .xz, .gz, .zst) or\n"
      "their .tsv(.gz) form.");
  cmd->add_option("TRACE", args->traces, "trace files to replay")->required();
  cmd->add_option("--policy", args->policy,
                  "policy to replay with: gpumem (gpumem's allocator), pytorch (PyTorch's native\n"
                  "caching allocator), pytorch-expandable (PyTorch with\n"
                  "expandable_segments:True), or all (every one, side by side)")
      ->default_str("all");
  cmd->add_option("--cap", args->cap,
                  "device memory the policy may hold, in bytes or with a unit: 17.3GB\n"
                  "(decimal), 16GiB (binary), 512MiB, 1.5TB; or a factor of each trace's peak\n"
                  "allocated: 1.02x. A policy that needs more reports an OOM at the event\n"
                  "where it failed (default: unlimited)");
  cmd->add_flag("--min-cap", args->min_cap,
                "find, per policy, the smallest device that still replays the whole trace\n"
                "(bisection to 2 MiB between the peak allocated and the uncapped reserve;\n"
                "about ten replays per policy). Prints the cap, its ratio to the peak\n"
                "allocated, and the largest cap tried that ran out of memory. With --json:\n"
                "keys trace, policy, min_cap, failed_cap, min_cap_ratio, peak_allocated,\n"
                "uncapped_reserved, replays");
  cmd->add_flag("--json", args->json,
                "print one JSON object per trace and policy per line (keys: trace, policy,\n"
                "events, peak_allocated, peak_reserved, ratio, seconds, capacity, oom; steps,\n"
                "warmup_steps, and the device calls (maps, unmaps, synchronizes, stream_waits,\n"
                "physical_creates, segment_allocs, segment_frees, stitches) in device_total,\n"
                "device_steady (the steps after the warm-up) and device_per_step)");
  cmd->add_option("--device-lag", args->device_lag,
                  "the simulated device runs this many trace events behind the host, as a GPU\n"
                  "runs behind the Python that queues its work: memory that waits for a\n"
                  "stream (another stream's frees) comes back that much later (default 0: at\n"
                  "once)");
  cmd->add_option("--page-size", args->page_size,
                  "gpumem's page, the unit it maps and moves (GPUMEM_PAGE_SIZE on a GPU): a\n"
                  "multiple of 2 MiB, e.g. 4MiB (default: 2 MiB). Larger pages mean fewer\n"
                  "driver calls for what stitching moves, and more memory held");
  cmd->add_option("--addresses", args->addresses,
                  "write where the policy put each block to this file (TSV: event index,\n"
                  "the trace's address, the policy's address, size), for layout studies\n"
                  "(bench/research/obstacle_plan_bound.py); needs one trace and one --policy");
  cmd->footer(
      "Exit status: 0 when every trace replayed (an OOM under --cap is a result, not an\n"
      "error); 2 on bad input (unreadable or corrupt trace, unknown action, an empty trace,\n"
      "a bad --cap or --policy), with one line on stderr naming the file and position. A\n"
      "free of an address that is not live is ignored and an alloc at a live address frees\n"
      "the earlier block, as gpumem report does; both are warned of on stderr.");
  cmd->callback([args, status] { *status = RunReplay(*args); });
}

}  // namespace gpumem::cli
