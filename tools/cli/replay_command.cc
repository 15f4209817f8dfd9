// gpumem replay: real allocation traces through allocation policies on a simulated
// device, side by side.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "allocator/policies.h"
#include "nlohmann/json.hpp"
#include "tools/cli/command.h"
#include "tools/replay/replayer.h"
#include "tools/replay/size_parser.h"
#include "tools/trace/load.h"

namespace gpumem::cli {
namespace {

struct ReplayArgs {
  std::vector<std::string> traces;
  std::string policy = "all";
  std::string cap;
  bool json = false;
};

std::string Gib(std::uint64_t bytes) {
  return absl::StrFormat("%.3f GiB", static_cast<double>(bytes) / (1u << 30));
}

std::string OomText(const replay::ReplayResult& r) {
  if (!r.oom) return "none";
  const replay::ReplayOom& o = *r.oom;
  return absl::StrFormat(
      "at event %d: requested %d B; allocated %s, reserved %s, largest free piece %s",
      o.event_index, o.requested_bytes, Gib(o.allocated_bytes), Gib(o.reserved_bytes),
      Gib(o.largest_free_bytes));
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

void PrintTable(const std::string& trace, const std::vector<replay::ReplayResult>& results) {
  std::printf("%s\n", trace.c_str());
  std::printf("  %-20s %10s %16s %16s %7s  %s\n", "policy", "events", "peak allocated",
              "peak reserved", "ratio", "OOM");
  for (const replay::ReplayResult& r : results) {
    std::printf("  %-20s %10zu %16s %16s %7.3f  %s\n", r.policy.c_str(), r.events,
                Gib(r.peak_allocated).c_str(), Gib(r.peak_reserved).c_str(), r.ratio,
                OomText(r).c_str());
  }
}

// One line on stderr, exit status 2: the one way bad input ends.
int BadInput(const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fprintf(stderr, "gpumem replay: %s\n", line.c_str());
  return kExitBadInput;
}

int RunReplay(const ReplayArgs& args) {
  replay::ReplayOptions options;
  if (!args.cap.empty()) {
    absl::StatusOr<std::uint64_t> cap = replay::ParseSize(args.cap);
    if (!cap.ok()) return BadInput(absl::StrCat("--cap: ", cap.status().message()));
    if (*cap == 0) return BadInput("--cap: the capacity must be more than 0 bytes");
    options.capacity = *cap;
  }
  std::vector<std::string> policies;
  if (args.policy == "all") {
    policies = PolicyNames();
  } else {
    const std::vector<std::string> known = PolicyNames();
    if (std::find(known.begin(), known.end(), args.policy) == known.end()) {
      return BadInput(absl::StrCat("--policy: unknown policy '", args.policy,
                                   "'; known: ", absl::StrJoin(known, ", "), ", all"));
    }
    policies.push_back(args.policy);
  }
  for (const std::string& path : args.traces) {
    absl::StatusOr<trace::Trace> trace = trace::LoadTrace(path);
    if (!trace.ok()) return BadInput(std::string(trace.status().message()));
    std::vector<replay::ReplayResult> results;
    for (const std::string& policy : policies) {
      absl::StatusOr<replay::ReplayResult> result = replay::Replay(*trace, policy, options);
      if (!result.ok()) return BadInput(std::string(result.status().message()));
      if (args.json) {
        std::printf("%s\n", ToJson(path, *result).dump().c_str());
      } else {
        results.push_back(*std::move(result));
      }
    }
    if (!args.json) PrintTable(path, results);
    std::fflush(stdout);
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
      "sizes the trace's own alloc events hold live at once. Traces: PyTorch memory snapshots\n"
      "(torch.cuda.memory._snapshot() pickled; plain, .xz, .gz, .zst) or their .tsv(.gz) form.");
  cmd->add_option("TRACE", args->traces, "trace files to replay")->required();
  cmd->add_option("--policy", args->policy,
                  "policy to replay with: gpumem (gpumem's allocator), pytorch (PyTorch's native\n"
                  "caching allocator), pytorch-expandable (PyTorch with\n"
                  "expandable_segments:True), or all (every one, side by side)")
      ->default_str("all");
  cmd->add_option("--cap", args->cap,
                  "device memory the policy may hold, in bytes or with a unit: 17.3GB\n"
                  "(decimal), 16GiB (binary), 512MiB, 1.5TB; a policy that needs more reports\n"
                  "an OOM at the event where it failed (default: unlimited)");
  cmd->add_flag("--json", args->json,
                "print one JSON object per trace and policy per line (keys: trace, policy,\n"
                "events, peak_allocated, peak_reserved, ratio, seconds, oom)");
  cmd->footer(
      "Exit status: 0 when every trace replayed (an OOM under --cap is a result, not an\n"
      "error); 2 on bad input (unreadable, corrupt or truncated trace, unknown action, a free\n"
      "of an address that is not live, an empty trace, a bad --cap or --policy), with one line\n"
      "on stderr naming the file and position.");
  cmd->callback([args, status] { *status = RunReplay(*args); });
}

}  // namespace gpumem::cli
