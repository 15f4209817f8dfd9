#include "hooks/torch/profile.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "hooks/gpumem.h"
#include "hooks/torch/c_error.h"
#include "hooks/torch/autograd_link.h"
#include "hooks/torch/torch_unwinder.h"

namespace gpumem::torch {
namespace {

namespace cca = c10::cuda::CUDACachingAllocator;

std::atomic<bool> g_profiling{false};

// The stack this thread captured for its allocation in flight: PyTorch asks for the
// context (GatherContext) before taking its allocator lock and reports the events under
// it, where the GIL must not be taken (a GIL holder may be waiting for that lock).
struct Pending {
  std::uint32_t stack = 0;
  bool set = false;
};
thread_local Pending t_pending;

// recordHistory's parameters differ between PyTorch releases (4 to 6 of them): read them
// off the member function so this compiles against each.
template <typename C, typename R, typename... A>
std::tuple<std::decay_t<A>...> ParamsOf(R (C::*)(A...));
using HistoryParams = decltype(ParamsOf(&cca::CUDAAllocator::recordHistory));
using ContextFn = std::tuple_element_t<1, HistoryParams>;          // CreateContextFn
using RecordWhen = std::tuple_element_t<3, HistoryParams>;         // RecordContext
using Context = std::invoke_result_t<ContextFn>;                   // shared_ptr<GatheredContext>

// What the program itself asked of PyTorch's history (torch.cuda.memory.
// _record_memory_history): gpumem's recorder stays in place and gathers PyTorch's
// traceback for it as well.
struct UserHistory {
  bool on = false;
  bool cpp = false;  // stacks="all": C++ frames too
  std::size_t max_entries = 1;
  RecordWhen when = RecordWhen::STATE;
};
std::atomic<bool> g_user_history{false};
std::atomic<bool> g_user_cpp{false};

// PyTorch's context recorder, called on the allocating thread before the allocator's lock
// (for allocations only, at RecordContext::STATE). The stack goes to gpumem's trace; the
// program's own history, if it asked for one, gets PyTorch's traceback as usual.
Context GatherContext() {
  t_pending.stack = gpumem_capture_stack();
  t_pending.set = true;
  if (gpumem_tracing() != 0) LinkNextAllocationToAutograd();
  if (!g_user_history.load(std::memory_order_relaxed)) return Context{};
  return ::torch::CapturedTraceback::gather(/*python=*/true, /*script=*/true,
                                            g_user_cpp.load(std::memory_order_relaxed));
}

template <std::size_t... I>
void EnableContextRecorder(const UserHistory& user, std::index_sequence<I...>) {
  HistoryParams params{};
  std::get<0>(params) = true;
  std::get<1>(params) = &GatherContext;
  // Without the program's history, PyTorch's own ring is kept minimal and context is
  // asked on allocations only.
  std::get<2>(params) = user.on ? std::max<std::size_t>(user.max_entries, 1) : 1;
  std::get<3>(params) = user.on && user.when > RecordWhen::STATE ? user.when : RecordWhen::STATE;
  // The rest (clearHistory, skip_actions, ...) keep their value-initialized defaults.
  cca::get()->recordHistory(std::get<I>(params)...);
}

void EnableContextRecorder(const UserHistory& user) {
  g_user_cpp.store(user.cpp, std::memory_order_relaxed);
  g_user_history.store(user.on, std::memory_order_relaxed);
  EnableContextRecorder(user, std::make_index_sequence<std::tuple_size_v<HistoryParams>>{});
}

// Called by PyTorch under its allocator lock, on the thread that caused the event.
template <typename Entry>
void Track(const Entry& te) {
  int type = 0;
  switch (te.action_) {
    case Entry::ALLOC: type = GPUMEM_EVENT_ALLOC; break;
    case Entry::FREE_REQUESTED: type = GPUMEM_EVENT_FREE; break;
    case Entry::SEGMENT_ALLOC: type = GPUMEM_EVENT_SEGMENT_ALLOC; break;
    case Entry::SEGMENT_FREE: type = GPUMEM_EVENT_SEGMENT_FREE; break;
    case Entry::SEGMENT_MAP: type = GPUMEM_EVENT_MAP; break;
    case Entry::SEGMENT_UNMAP: type = GPUMEM_EVENT_UNMAP; break;
    case Entry::OOM: type = GPUMEM_EVENT_OOM; break;
    default: return;  // FREE_COMPLETED, SNAPSHOT: not allocation events of the program
  }
  int device = 0;
  if constexpr (requires { te.device_; }) device = static_cast<int>(te.device_);
  // cudaStream_t or void* in most releases; a c10::Stream in some.
  std::uint64_t stream = 0;
  if constexpr (std::is_pointer_v<std::decay_t<decltype(te.stream_)>>) {
    stream = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(te.stream_));
  } else if constexpr (requires { te.stream_.id(); }) {
    stream = static_cast<std::uint64_t>(te.stream_.id());
  }
  // Allocations and the segments they create carry the stack taken before the lock.
  std::uint32_t stack = 0;
  if (type == GPUMEM_EVENT_ALLOC || type == GPUMEM_EVENT_SEGMENT_ALLOC ||
      type == GPUMEM_EVENT_MAP || type == GPUMEM_EVENT_OOM) {
    stack = t_pending.set ? t_pending.stack : 0;
  }
  if (type == GPUMEM_EVENT_ALLOC) t_pending.set = false;
  if (type == GPUMEM_EVENT_OOM) {
    // For OOM, PyTorch puts the device's free bytes in addr_ and the request in size_.
    gpumem_record_event(type, device, 0, static_cast<std::uint64_t>(te.size_), stream, stack,
                        static_cast<std::uint64_t>(te.addr_));
    return;
  }
  gpumem_record_event(type, device, static_cast<std::uint64_t>(te.addr_),
                      static_cast<std::uint64_t>(te.size_), stream, stack, 0);
}

// PyTorch's OOM observer, called before OutOfMemoryError is raised (after its allocator
// lock is released): the verdict goes to stderr and the trace is flushed then.
// `limit`: the per-process fraction's cap, else the device's total.
void ExplainOom(std::int64_t device, std::size_t requested, std::size_t limit,
                std::size_t device_free) {
  gpumem_oom_figures_t f{};
  f.requested_bytes = requested;
  f.capacity_bytes = limit;
  f.driver_free_bytes = device_free;
  const auto stats = cca::get()->getDeviceStats(static_cast<c10::DeviceIndex>(device));
  f.allocated_bytes = static_cast<std::uint64_t>(stats.allocated_bytes[0].current);  // 0: all
  f.reserved_bytes = static_cast<std::uint64_t>(stats.reserved_bytes[0].current);
  gpumem_explain_oom(static_cast<int>(device), &f);
}

}  // namespace

void profile() {
  if (g_profiling.load()) return;
  std::string config_error(gpumem_config_error(nullptr, 0), '\0');
  if (gpumem_config_error(config_error.data(), config_error.size()) != 0) {
    config_error.resize(config_error.size() - 1);
    TORCH_CHECK(false, config_error);
  }
  cca::CUDAAllocator* allocator = cca::get();
  TORCH_CHECK(allocator != nullptr && allocator->initialized(),
              "gpumem profile-only mode needs CUDA initialized first (call "
              "torch.cuda.init(), or use gpumem.profile(), which waits for it)");
  const std::string name = allocator->name();
  TORCH_CHECK(name == "native",
              "gpumem profile-only mode records PyTorch's native caching allocator, but "
              "the current CUDA allocator is '", name, "'. Fix: do not install gpumem "
              "(GPUMEM_MODE=profile instead of the allocator mode) and leave "
              "PYTORCH_CUDA_ALLOC_CONF's backend at native.");
  if (gpumem_profile_start() != 0) {
    std::string err(gpumem_last_error(nullptr, 0), '\0');
    gpumem_last_error(err.data(), err.size());
    err.resize(err.size() - 1);
    TORCH_CHECK(false, err);
  }
  UsePytorchUnwinder();
  // Trackers are called whether or not history is recorded; the context recorder only
  // runs with history on, so it is turned on with the smallest ring PyTorch allows.
  EnableContextRecorder(UserHistory{});
  cca::attachAllocatorTraceTracker([](const auto& te) { Track(te); });
  cca::attachOutOfMemoryObserver(&ExplainOom);
  g_profiling.store(true);
}

bool profiling() { return g_profiling.load(); }

void UserHistoryChanged(bool on, int when, bool cpp, std::size_t max_entries) {
  if (!g_profiling.load()) return;
  EnableContextRecorder(UserHistory{on, cpp, max_entries, static_cast<RecordWhen>(when)});
}

}  // namespace gpumem::torch

extern "C" int gpumem_torch_profile_user_history(int on, int when, int cpp, std::size_t max_entries,
                                                 char* err, std::size_t len) {
  return gpumem::torch::CatchToCError(
      [&] { gpumem::torch::UserHistoryChanged(on != 0, when, cpp != 0, max_entries); }, err, len);
}

extern "C" int gpumem_torch_profile(char* err, std::size_t len) {
  return gpumem::torch::CatchToCError([] { gpumem::torch::profile(); }, err, len);
}
