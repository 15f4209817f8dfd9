// libgpumem_cupti.so: loaded by the CUDA driver through CUDA_INJECTION64_PATH (which
// `gpumem run` sets), it records every driver and runtime memory call of the process --
// cuBLAS workspaces, NCCL buffers, PyTorch's own segments, a plain cudaMalloc -- with the
// calling thread's stack, into a gpumem trace (docs/profiler.md). It also notices CUDA
// being used in a child forked from a process that had CUDA, and says how to fix it.
#include <cupti.h>
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "profiler/cupti/memory_call.h"
#include "profiler/cupti/tracer_options.h"
#include "profiler/driver_memory.h"
#include "profiler/fork_advice.h"
#include "profiler/library_holdings.h"
#include "profiler/recorder.h"
#include "profiler/trace_path.h"
#include "tools/report/library_kind.h"

namespace gpumem::cupti {
namespace {

struct LiveBlock {
  std::uint64_t size;
  std::int32_t device;
};

struct LibrarySite {
  report::OutsideLibrary library;
  std::string site;  // the user's line; empty for a library's own thread
};

// Never destroyed: CUDA may still call back while the process exits.
struct Tracer {
  // Opened at the first call recorded: a process that never allocates device memory
  // (torchrun's launcher, which only counts GPUs) writes no trace and takes no name.
  std::once_flag open_once;
  Recorder* recorder = nullptr;
  std::string path_pattern;
  std::string parent_path;
  RecorderOptions options;
  std::mutex mu;  // guards `live` and `library_site`
  absl::flat_hash_map<std::uint64_t, LiveBlock> live;
  // By stack: the library outside the allocator that allocated and its site, or nullopt
  // for the allocator's own (classed once per stack).
  absl::flat_hash_map<std::uint32_t, std::optional<LibrarySite>> library_site;
  LibraryHoldings libraries;  // for the dying process (gpumem_cupti_library_*)
};
Tracer* g_tracer = nullptr;
std::atomic<bool> g_forked_child{false};
std::atomic<bool> g_fork_reported{false};

// The runtime call this thread is inside, so the driver call it makes is recorded once,
// under the runtime's name.
thread_local const char* t_runtime_api = nullptr;
thread_local bool t_runtime_recorded = false;
thread_local bool t_runtime_failed = false;  // its driver call failed: released already

constexpr std::uint64_t kHandleBit = std::uint64_t{1} << 63;  // cuMemCreate handles

void AfterForkInChild() { g_forked_child.store(true); }


void ReportForkedChild(const char* function) {
  if (g_fork_reported.exchange(true)) return;
  const std::string message =
      ForkedChildCudaMessage(function != nullptr ? function : "?", static_cast<long>(getpid()));
  std::fputs(message.c_str(), stderr);
  // The parent's trace belongs to the parent; the child gets its own.
  RecorderOptions options = g_tracer->options;
  std::string path = ExpandTracePath(options.path, getpid(), RankFromEnvironment());
  if (path == g_tracer->parent_path) path += ".child-" + std::to_string(getpid());
  options.path = path;
  options.writer.header["source"] = "cupti (forked child)";
  auto recorder = Recorder::Open(options);
  if (!recorder.ok()) return;
  (*recorder)->Annotate(-1, ForkedChildCudaAnnotation(function != nullptr ? function : "?"),
                        true);
  // Annotations are not journaled: make this one durable now, the worker may die soon.
  (*recorder)->Flush();
  std::call_once(g_tracer->open_once, [] {});  // the parent's trace is never opened here
  {
    std::lock_guard<std::mutex> lock(g_tracer->mu);
    g_tracer->library_site.clear();  // its stack ids were the parent recorder's
  }
  g_tracer->recorder = recorder->release();
  g_forked_child.store(false);  // from now on this process records into its own trace
}

std::int32_t DeviceOf(const CUpti_CallbackData* cb) {
  if (cb->context == nullptr) return 0;
  std::uint32_t id = 0;
  if (cuptiGetDeviceId(cb->context, &id) != CUPTI_SUCCESS) return 0;
  return static_cast<std::int32_t>(id);
}

// A library's device allocation failed: under gpumem's allocator (libgpumem.so loaded),
// its idle memory goes back so that a retry succeeds. Found at run time: this library
// also runs without it (profile-only mode, PyTorch's own allocator).
void ReleaseIdleFor(const MemoryCall& call, const CUpti_CallbackData* cb) {
  if (!TakesDeviceMemory(call)) return;
  using ReleaseIdle = void (*)(int);
  static const auto release =
      reinterpret_cast<ReleaseIdle>(dlsym(RTLD_DEFAULT, "gpumem_release_idle"));
  if (release != nullptr) release(call.device.value_or(DeviceOf(cb)));
}

// gpumem's allocator (where loaded) asked whether this driver call is its own, and told
// of another library's new memory so that it keeps its headroom.
template <typename Fn>
Fn GpumemFunction(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

bool GpumemsOwnCall() {
  static const auto calling = GpumemFunction<int (*)()>("gpumem_calling_driver");
  return calling != nullptr && calling() != 0;
}

void KeepHeadroomAfter(const MemoryCall& call, const CUpti_CallbackData* cb) {
  if (!TakesDeviceMemory(call)) return;
  static const auto keep = GpumemFunction<void (*)(int)>("gpumem_keep_headroom");
  if (keep != nullptr) keep(call.device.value_or(DeviceOf(cb)));
}

// What the driver has free on the current context's device, if it can say: the failed
// call's context is current in its callback.
std::optional<std::uint64_t> DriverFreeBytes() {
  const std::optional<DriverMemory> memory = SampleDriverMemory();
  if (!memory) return std::nullopt;
  return memory->free;
}

// The API frame: the call's name, or the runtime call that made it.
std::uint32_t ApiFrame(Recorder* recorder, const MemoryCall& call, const char* runtime_api) {
  const std::string function = runtime_api != nullptr ? runtime_api : call.api;
  const std::string file = runtime_api != nullptr
                               ? std::string("[cuda-runtime] via ") + call.api
                               : std::string(call.runtime ? "[cuda-runtime]" : "[cuda-driver]");
  return recorder->writer().stacks().InternNamedFrame(format::FrameKind::kApi, function, file,
                                                      0);
}

// Under torchrun each rank says where its calls go.
void SayWhereTracing(const Recorder& recorder) {
  const std::string& path = recorder.trace_path();
  if (recorder.ring().bounded()) {
    std::fprintf(stderr, "gpumem-cupti: tracing CUDA memory calls to %s (a ring within %llu "
                 "bytes under GPUMEM_TRACE_MAX: segments %s)\n", path.c_str(),
                 static_cast<unsigned long long>(recorder.ring().max_bytes()),
                 format::RingSegmentName(path, 0).c_str());
  } else {
    std::fprintf(stderr, "gpumem-cupti: tracing CUDA memory calls to %s\n", path.c_str());
  }
}

// The process's CUPTI trace, opened at its first use (Tracer::open_once).
Recorder* OpenRecorder() {
  std::call_once(g_tracer->open_once, [] {
    auto recorder = Recorder::Open(g_tracer->options);
    if (!recorder.ok()) {
      std::fprintf(stderr, "gpumem-cupti: %s; not tracing\n",
                   std::string(recorder.status().message()).c_str());
      return;
    }
    g_tracer->recorder = recorder->release();
    SayWhereTracing(*g_tracer->recorder);
  });
  return g_tracer->recorder;
}

// A device-memory call that failed, with the driver's free memory at that moment: the
// library that made it (cuBLAS, cuDNN, NCCL) often reports it as something else.
// Out of line: native stacks leave out exactly this frame and OnCallback's.
__attribute__((noinline)) void RecordFailure(const MemoryCall& call, const CUpti_CallbackData* cb,
                                             const char* runtime_api, std::uint32_t error) {
  if (!TakesDeviceMemory(call)) return;
  Recorder* recorder = OpenRecorder();
  if (recorder == nullptr) return;
  const std::uint64_t word = format::FailedCallWord(format::MemoryApiOf(call.api), error);
  recorder->RecordEvent(format::RecordType::kFailedAlloc, call.device.value_or(DeviceOf(cb)),
                        word, call.size, call.stream, ApiFrame(recorder, call, runtime_api),
                        DriverFreeBytes(), /*skip=*/2, /*with_native=*/true);
}

// The library outside the allocator that made an allocation with stack `stack` (its first
// native frame past the CUDA plumbing, as the report classes it) and the user's line that
// called it (empty where none did); nullopt for the allocator's own, or where no native
// frame says.
std::optional<LibrarySite> LibraryOf(Recorder* recorder, std::uint32_t stack) {
  std::lock_guard<std::mutex> lock(g_tracer->mu);
  auto [it, added] = g_tracer->library_site.try_emplace(stack);
  if (!added) return it->second;
  const std::vector<StackTable::NamedFrame> frames = recorder->StackFrames(stack);
  for (const StackTable::NamedFrame& f : frames) {
    const report::OutsideLibrary library = report::LibraryOfFrame(f.filename, f.line);
    if (library == report::OutsideLibrary::kUnknown) continue;
    if (library != report::OutsideLibrary::kAllocator) {
      it->second = LibrarySite{library, Recorder::UserSiteOf(frames)};
    }
    break;
  }
  return it->second;
}

// Device memory the process's own libraries outside the allocator take and give back.
void CountLibraryHolding(Recorder* recorder, const MemoryCall& call, std::uint64_t key,
                         std::int32_t device, std::uint64_t size, std::uint32_t stack) {
  if (call.frees) {
    g_tracer->libraries.OnFree(key);
    return;
  }
  if (!NamesItsLibrary(call)) return;
  if (const std::optional<LibrarySite> by = LibraryOf(recorder, stack)) {
    g_tracer->libraries.OnAlloc(key, device, by->library, size, by->site);
  }
}

// Out of line: native stacks leave out exactly this frame and OnCallback's.
__attribute__((noinline)) void Record(const MemoryCall& call, const CUpti_CallbackData* cb,
                                      const char* runtime_api) {
  Recorder* recorder = OpenRecorder();
  if (recorder == nullptr) return;
  std::int32_t device = call.host ? -1 : call.device.value_or(DeviceOf(cb));
  std::uint64_t size = call.size;
  const std::uint64_t key = call.handle ? call.addr | kHandleBit : call.addr;
  {
    std::lock_guard<std::mutex> lock(g_tracer->mu);
    if (call.type == format::RecordType::kSegmentAlloc) {
      g_tracer->live[key] = {size, device};
    } else if (call.frees) {
      auto it = g_tracer->live.find(key);
      if (it != g_tracer->live.end()) {
        size = it->second.size;
        device = it->second.device;
        g_tracer->live.erase(it);
      }
    }
  }
  // Skips OnCallback's frame (CaptureStack leaves out its own and this one).
  const std::uint32_t stack = recorder->CaptureStack(ApiFrame(recorder, call, runtime_api),
                                                     /*skip=*/1, /*may_take_gil=*/true,
                                                     NamesItsLibrary(call));
  recorder->RecordWithStack(call.type, device, call.addr, size, call.stream, stack);
  CountLibraryHolding(recorder, call, key, device, size, stack);
}

__attribute__((noinline)) void CUPTIAPI OnCallback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                         const void* data) {
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (g_forked_child.load(std::memory_order_relaxed)) ReportForkedChild(cb->functionName);
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    if (cb->callbackSite == CUPTI_API_ENTER) {
      std::optional<MemoryCall> call = DecodeRuntimeCall(cbid, cb->functionParams);
      t_runtime_api = call ? call->api : nullptr;
      t_runtime_recorded = false;
      return;
    }
    // The runtime made no driver memory call we saw (or did it through a path CUPTI
    // does not report): record the runtime call itself.
    const auto* rv = static_cast<const int*>(cb->functionReturnValue);
    const bool ok = rv == nullptr || *rv == 0;
    if ((!ok && !t_runtime_failed) || (ok && !t_runtime_recorded)) {
      if (std::optional<MemoryCall> call = DecodeRuntimeCall(cbid, cb->functionParams)) {
        if (ok) {
          Record(*call, cb, nullptr);
          KeepHeadroomAfter(*call, cb);
        } else {
          RecordFailure(*call, cb, nullptr, static_cast<std::uint32_t>(*rv));
          ReleaseIdleFor(*call, cb);
        }
      }
    }
    t_runtime_api = nullptr;
    t_runtime_failed = false;
    return;
  }
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cb->callbackSite != CUPTI_API_EXIT) return;
  const auto* rv = static_cast<const CUresult*>(cb->functionReturnValue);
  std::optional<MemoryCall> call = DecodeDriverCall(cbid, cb->functionParams);
  if (!call || GpumemsOwnCall()) return;  // gpumem's pages are in its own trace
  if (rv != nullptr && *rv != CUDA_SUCCESS) {
    RecordFailure(*call, cb, t_runtime_api, static_cast<std::uint32_t>(*rv));
    ReleaseIdleFor(*call, cb);
    if (t_runtime_api != nullptr) t_runtime_failed = true;
    return;
  }
  Record(*call, cb, t_runtime_api);
  if (t_runtime_api != nullptr) t_runtime_recorded = true;
  KeepHeadroomAfter(*call, cb);
}

void Shutdown() {
  if (g_tracer == nullptr || g_tracer->recorder == nullptr) return;
  if (g_forked_child.load()) return;  // the parent's recorder: its thread is not here
  (void)g_tracer->recorder->Close();
}

}  // namespace
}  // namespace gpumem::cupti

// What this process's own libraries outside the allocator hold
// (profiler/library_holdings.h), for the verdict at an OOM: libgpumem.so finds these
// through CUDA_INJECTION64_PATH. `library` is a report::OutsideLibrary.
#define GPUMEM_CUPTI_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
bool IsOutsideLibrary(int library) {
  return library >= 0 && library < static_cast<int>(gpumem::report::kOutsideLibraries);
}
}  // namespace

// Devices 0..63 on which such libraries ever held memory, one bit each.
GPUMEM_CUPTI_EXPORT std::uint64_t gpumem_cupti_library_devices() {
  return gpumem::cupti::g_tracer == nullptr ? 0 : gpumem::cupti::g_tracer->libraries.Devices();
}

GPUMEM_CUPTI_EXPORT std::uint64_t gpumem_cupti_outside_bytes(int device, int library) {
  if (gpumem::cupti::g_tracer == nullptr || !IsOutsideLibrary(library)) return 0;
  return gpumem::cupti::g_tracer->libraries.Bytes(
      device, static_cast<gpumem::report::OutsideLibrary>(library));
}

// The site holding most of the library's memory on the device, NUL-terminated into `buf`
// (cut to fit); returns its whole length.
GPUMEM_CUPTI_EXPORT std::size_t gpumem_cupti_outside_site(int device, int library, char* buf,
                                                          std::size_t len) {
  const std::string site =
      gpumem::cupti::g_tracer == nullptr || !IsOutsideLibrary(library)
          ? ""
          : gpumem::cupti::g_tracer->libraries.TopSite(
                device, static_cast<gpumem::report::OutsideLibrary>(library));
  if (len > 0) {
    const std::size_t n = std::min(site.size(), len - 1);
    site.copy(buf, n);
    buf[n] = '\0';
  }
  return site.size();
}

// The entry point the CUDA driver calls when CUDA_INJECTION64_PATH names this library.
extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  using namespace gpumem;
  using namespace gpumem::cupti;
  static std::once_flag once;
  static int result = 1;
  std::call_once(once, [] {
    absl::StatusOr<RecorderOptions> options = TracerOptionsFromEnvironment();
    if (!options.ok()) {
      std::fprintf(stderr, "gpumem-cupti: %s; not tracing\n",
                   std::string(options.status().message()).c_str());
      return;
    }
    auto* tracer = new Tracer();
    tracer->options = *options;
    tracer->parent_path = ExpandTracePath(options->path, getpid(), RankFromEnvironment());
    g_tracer = tracer;
    CUpti_SubscriberHandle subscriber;
    if (cuptiSubscribe(&subscriber, &OnCallback, nullptr) != CUPTI_SUCCESS) {
      std::fprintf(stderr, "gpumem-cupti: cuptiSubscribe failed (another CUPTI client, "
                           "e.g. a profiler, may hold it); not tracing\n");
      return;
    }
    std::size_t n = 0;
    const CUpti_CallbackId* ids = DriverCallbackIds(&n);
    for (std::size_t i = 0; i < n; ++i) {
      cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API, ids[i]);
    }
    ids = RuntimeCallbackIds(&n);
    for (std::size_t i = 0; i < n; ++i) {
      cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, ids[i]);
    }
    pthread_atfork(nullptr, nullptr, &AfterForkInChild);
    std::atexit(&Shutdown);
  });
  return result;
}
