// gpumem dump TRACE: every event of a trace as one line of text, optionally with its
// stack; for gpumem traces the file header first. Any trace format LoadTrace reads works.
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/strings/str_format.h"
#include "tools/cli/command.h"
#include "tools/trace/decompress.h"
#include "tools/trace/gpumem_reader.h"
#include "tools/trace/load.h"
#include "tools/trace/plausible_sizes.h"

namespace gpumem::cli {
namespace {

struct DumpArgs {
  std::string path;
  bool stacks = false;
  std::size_t limit = 0;
};

void PrintStack(const trace::Trace& t, std::uint32_t stack_id) {
  if (stack_id >= t.stacks.size()) return;
  for (std::uint32_t f : t.stacks[stack_id]) {
    const trace::Frame& frame = t.frames[f];
    if (frame.line > 0) {
      std::printf("    at %s (%s:%d)\n", frame.function.c_str(), frame.filename.c_str(),
                  frame.line);
    } else {
      std::printf("    at %s (%s)\n", frame.function.c_str(), frame.filename.c_str());
    }
  }
}

void PrintEvent(const trace::Trace& t, const trace::Event& e, bool stacks) {
  std::string line = absl::StrFormat("%d\t%s\tdevice=%d\tstream=0x%x\tthread=%d", e.time_us,
                                     trace::ActionName(e.action), e.device, e.stream, e.thread);
  if (e.action == trace::Action::kStep) {
    absl::StrAppendFormat(&line, "\tstep=%d", e.size);
  } else {
    absl::StrAppendFormat(&line, "\taddr=0x%x\tsize=%d", e.addr, e.size);
  }
  if (e.action == trace::Action::kOom) absl::StrAppendFormat(&line, "\tdevice_free=%d", e.device_free);
  if (e.stack_id != 0) absl::StrAppendFormat(&line, "\tstack=%d", e.stack_id);
  std::printf("%s\n", line.c_str());
  if (stacks && e.stack_id != 0) PrintStack(t, e.stack_id);
}

// Whether the file (decompressed) starts as a gpumem trace; read errors are left to the
// reader that follows.
bool IsGpumemFile(const std::string& path) {
  auto reader = trace::DecompressingReader::OpenFile(path);
  if (!reader.ok()) return false;
  absl::StatusOr<absl::string_view> head = (*reader)->Peek();
  return head.ok() && trace::IsGpumemTrace(*head);
}

// gpumem traces are read directly, so that their header (pid, rank, host...) can be shown:
// `info` holds it then, and `gpumem_format` says so.
absl::StatusOr<trace::Trace> LoadForDump(const std::string& path, trace::GpumemFileInfo* info,
                                         bool* gpumem_format) {
  *gpumem_format = IsGpumemFile(path);
  if (!*gpumem_format) return trace::LoadTrace(path);
  absl::StatusOr<std::string> bytes = trace::ReadFileDecompressed(path);
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<trace::Trace> t = trace::ParseGpumemTrace(*bytes, path, info);
  if (!t.ok()) return t;
  if (absl::Status sizes = trace::CheckPlausibleSizes(*t); !sizes.ok()) return sizes;
  return t;
}

void PrintAnnotation(const trace::Annotation& an) {
  std::printf("%lld\tannotate\tdevice=%d\t%s\t%s\n", static_cast<long long>(an.time_us),
              an.device, an.start ? "start" : "end", an.name.c_str());
}

// A device-memory call of another library that failed (the CUPTI tracer's records).
void PrintFailed(const trace::Trace& t, const trace::FailedAllocation& f, bool stacks) {
  std::string line = absl::StrFormat("%d\tfailed_alloc\tdevice=%d\t%s\tsize=%d\t%s", f.time_us,
                                     f.device, f.call, f.size, trace::FailedCallErrorName(f));
  if (f.device_free) absl::StrAppendFormat(&line, "\tdevice_free=%d", *f.device_free);
  if (f.stack_id != 0) absl::StrAppendFormat(&line, "\tstack=%d", f.stack_id);
  std::printf("%s\n", line.c_str());
  if (stacks && f.stack_id != 0) PrintStack(t, f.stack_id);
}

// The first `limit` events (0: all, then every annotation and failed call), each
// annotation and failed call before the first event that comes after it.
void PrintEvents(const trace::Trace& t, std::size_t limit, bool stacks) {
  std::printf("# time_us\taction\tdevice\tstream\tthread\taddr/step\tsize\tstack\n");
  std::size_t a = 0, f = 0;
  auto print_until = [&](std::int64_t time_us) {
    for (; a < t.annotations.size() && t.annotations[a].time_us <= time_us; ++a) {
      PrintAnnotation(t.annotations[a]);
    }
    for (; f < t.failed_allocations.size() && t.failed_allocations[f].time_us <= time_us; ++f) {
      PrintFailed(t, t.failed_allocations[f], stacks);
    }
  };
  const std::size_t n = limit == 0 ? t.events.size() : std::min(limit, t.events.size());
  for (std::size_t i = 0; i < n; ++i) {
    print_until(t.events[i].time_us);
    PrintEvent(t, t.events[i], stacks);
  }
  if (limit == 0) print_until(INT64_MAX);
}

int RunDump(const DumpArgs& args) {
  trace::GpumemFileInfo info;
  bool gpumem_format = false;
  absl::StatusOr<trace::Trace> t = LoadForDump(args.path, &info, &gpumem_format);
  if (!t.ok()) {
    std::fprintf(stderr, "gpumem dump: %s\n", std::string(t.status().message()).c_str());
    return kExitBadInput;
  }
  for (const std::string& w : t->warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  std::printf("# %s: format %s, %zu events, %zu stacks\n", args.path.c_str(),
              t->format.c_str(), t->events.size(), t->stacks.size() - 1);
  if (gpumem_format) {
    for (const auto& [key, value] : info.header) {
      std::printf("# %s=%s\n", key.c_str(), value.c_str());
    }
  }
  PrintEvents(*t, args.limit, args.stacks);
  return kExitOk;
}

}  // namespace

void AddDumpCommand(CLI::App& app, int* status) {
  auto args = std::make_shared<DumpArgs>();
  CLI::App* cmd = app.add_subcommand(
      "dump", "Print a trace's events, annotations and failed driver calls as text, one a "
              "line (gpumem traces, PyTorch snapshot pickles, .tsv traces). Recovered-data "
              "warnings go to stderr.");
  cmd->add_option("TRACE", args->path, "trace file")->required();
  cmd->add_flag("--stacks", args->stacks, "print each event's frames below it");
  cmd->add_option("--limit", args->limit, "print only the first N events (0: all)");
  cmd->callback([args, status] { *status = RunDump(*args); });
}

}  // namespace gpumem::cli
