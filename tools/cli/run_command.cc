// gpumem run: starts a program with gpumem as PyTorch's CUDA allocator (or, with
// --profile-only, recording PyTorch's own allocator), unchanged. It
// sets GPUMEM=1, puts gpumem's sitecustomize (python/gpumem/_preload) and package on
// PYTHONPATH and points GPUMEM_LIB_DIR at libgpumem.so, then replaces itself with the
// program. Options become GPUMEM_* variables, validated before the program starts.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "hooks/config.h"
#include "tools/cli/command.h"
#include "tools/cli/run_checks.h"
#include "tools/cli/tree_paths.h"

namespace gpumem::cli {
namespace {

struct RunArgs {
  std::vector<std::string> command;
  std::string backend;
  std::string capacity;
  std::string fraction;
  std::string trace;
  bool verbose = false;
  bool profile_only = false;
  bool no_cupti = false;
};

int Run(const RunArgs& args) {
  if (!args.backend.empty()) setenv("GPUMEM_BACKEND", args.backend.c_str(), 1);
  if (!args.capacity.empty()) setenv("GPUMEM_CAPACITY", args.capacity.c_str(), 1);
  if (!args.fraction.empty()) setenv("GPUMEM_MEMORY_FRACTION", args.fraction.c_str(), 1);
  if (!args.trace.empty()) setenv("GPUMEM_TRACE", args.trace.c_str(), 1);
  if (args.verbose) setenv("GPUMEM_VERBOSE", "1", 1);
  if (args.profile_only) setenv("GPUMEM_MODE", "profile", 1);
  setenv("GPUMEM", "1", 1);
  // Refuse here, with the variable named, rather than inside the program.
  if (absl::StatusOr<hooks::Config> config = hooks::ParseConfigFromEnvironment(); !config.ok()) {
    std::fprintf(stderr, "gpumem run: %s\n", std::string(config.status().message()).c_str());
    return kExitBadInput;
  }
  if (absl::Status trace = CheckTraceSettings(); !trace.ok()) {
    std::fprintf(stderr, "gpumem run: %s\n", std::string(trace.message()).c_str());
    return kExitBadInput;
  }
  std::string python_dir = PythonDir();
  std::string lib_dir = LibDir();
  std::string path = absl::StrCat(python_dir, "/gpumem/_preload:", python_dir);
  if (const char* old = std::getenv("PYTHONPATH"); old != nullptr && *old != '\0') {
    absl::StrAppend(&path, ":", old);
  }
  setenv("PYTHONPATH", path.c_str(), 1);
  setenv("GPUMEM_LIB_DIR", lib_dir.c_str(), 1);
  // A traced run also records everyone else's device memory (cuBLAS workspaces, NCCL
  // buffers, a forked DataLoader worker touching CUDA) through the CUPTI tracer, which the
  // driver loads from CUDA_INJECTION64_PATH. A path the user set is kept.
  const char* trace = std::getenv("GPUMEM_TRACE");
  if (trace != nullptr && *trace != '\0' && !args.no_cupti &&
      std::getenv("CUDA_INJECTION64_PATH") == nullptr) {
    const std::string cupti = lib_dir + "/libgpumem_cupti.so";
    if (access(cupti.c_str(), R_OK) == 0) {
      setenv("CUDA_INJECTION64_PATH", cupti.c_str(), 1);
    } else if (args.verbose) {
      std::fprintf(stderr, "gpumem run: %s not built (no CUPTI): driver calls not traced\n",
                   cupti.c_str());
    }
  }

  std::vector<char*> argv;
  for (const std::string& a : args.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "gpumem run: cannot start '%s': %s\n", argv[0], std::strerror(errno));
  return kExitBadInput;
}

}  // namespace

void AddRunCommand(CLI::App& app, int* status) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* sub = app.add_subcommand(
      "run", "Run a program (e.g. python train.py) with gpumem as PyTorch's CUDA allocator, "
             "no code change: gpumem run [options] -- python train.py ...");
  sub->add_option("--backend", args->backend, "auto, vmm, cudamalloc or sim (GPUMEM_BACKEND)");
  sub->add_option("--capacity", args->capacity,
                  "most device memory gpumem may hold, e.g. 20G (GPUMEM_CAPACITY)");
  sub->add_option("--memory-fraction", args->fraction,
                  "cap as a share of the device's memory (GPUMEM_MEMORY_FRACTION)");
  sub->add_option("--trace", args->trace, "record allocations to this file (GPUMEM_TRACE)");
  sub->add_flag("-v,--verbose", args->verbose, "print each device's backend and cap");
  sub->add_flag("--profile-only", args->profile_only,
                "keep PyTorch's own allocator and only record it into the trace "
                "(GPUMEM_MODE=profile; --trace or GPUMEM_TRACE names the file)");
  sub->add_flag("--no-cupti", args->no_cupti,
                "with a trace, do not load the CUPTI tracer (libgpumem_cupti.so through "
                "CUDA_INJECTION64_PATH) that records other libraries' CUDA memory calls");
  sub->add_option("command", args->command, "the program and its arguments")
      ->required()
      ->expected(-1);
  sub->callback([args, status] { *status = Run(*args); });
}

}  // namespace gpumem::cli
