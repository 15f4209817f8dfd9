// The extern "C" functions of gpumem.h: argument checks, the device registry, and the
// translation of statuses into the C conventions (NULL, -1, text).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#ifdef GPUMEM_HAVE_CUDA
#include "allocator/cuda_driver.h"
#endif
#include "absl/strings/str_format.h"
#include "hooks/device_registry.h"
#include "hooks/gpumem.h"
#include "hooks/ipc.h"
#include "hooks/oom_verdict_hook.h"
#include "hooks/trace_hook.h"
#include "nlohmann/json.hpp"
#include "profiler/native_stack.h"
#include "profiler/recorder.h"

namespace gpumem::hooks {
namespace {

std::atomic<std::uint64_t> g_step{0};

// The last problem a C caller could not be told about by its return value; and this
// thread's own, for what gpumem_alloc_or_throw throws (another thread's failure may be
// the last by the time it reads), with whether it was an out of memory (not a device that
// could not start, nor CUDA refusing for another reason).
std::mutex g_error_mu;
std::string g_last_error;
thread_local std::string t_last_error;
thread_local bool t_last_error_was_oom = false;

void SetError(const std::string& message, bool out_of_memory = false) {
  t_last_error = message;
  t_last_error_was_oom = out_of_memory;
  std::lock_guard<std::mutex> lock(g_error_mu);
  g_last_error = message;
}

// Each start error is printed once, not on every allocation that hits it.
void ReportStartError(int device, const absl::Status& status) {
  static std::mutex mu;
  static bool printed[kMaxDevices + 1] = {};
  std::string message = absl::StrCat("gpumem: cannot start device ", device, ": ",
                                     status.message());
  SetError(message);
  std::lock_guard<std::mutex> lock(mu);
  bool& once = printed[device >= 0 && device < kMaxDevices ? device : kMaxDevices];
  if (!once) {
    once = true;
    std::fprintf(stderr, "%s\n", message.c_str());
  }
}

size_t CopyOut(const std::string& text, char* buf, size_t len) {
  if (buf != nullptr && len > 0) {
    size_t n = std::min(len - 1, text.size());
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size() + 1;
}

// `thread_cached_bytes` (optional): that figure of the same snapshot, which the C struct
// does not carry.
gpumem_stats_t StatsOf(DeviceState& s, std::uint64_t* thread_cached_bytes = nullptr) {
  AllocatorStats a = s.allocator->stats();
  if (thread_cached_bytes != nullptr) *thread_cached_bytes = a.thread_cached_bytes;
  gpumem_stats_t out{};
  out.allocated_bytes = a.allocated_bytes;
  out.peak_allocated_bytes = a.peak_allocated_bytes;
  out.reserved_bytes = a.reserved_bytes;
  out.peak_reserved_bytes = a.peak_reserved_bytes;
  out.active_blocks = a.active_blocks;
  out.alloc_count = a.alloc_count;
  out.free_count = a.free_count;
  out.oom_count = a.oom_count;
  out.stitch_count = a.stitch_count;
  out.trim_count = a.trim_count;
  out.largest_free_bytes = a.largest_free_bytes;
  out.capacity_bytes = s.capacity;
  out.device_total_bytes = s.backend.device_total_bytes;
  out.step = g_step.load();
  return out;
}

void Add(gpumem_stats_t& sum, const gpumem_stats_t& s) {
  sum.allocated_bytes += s.allocated_bytes;
  sum.peak_allocated_bytes += s.peak_allocated_bytes;
  sum.reserved_bytes += s.reserved_bytes;
  sum.peak_reserved_bytes += s.peak_reserved_bytes;
  sum.active_blocks += s.active_blocks;
  sum.alloc_count += s.alloc_count;
  sum.free_count += s.free_count;
  sum.oom_count += s.oom_count;
  sum.stitch_count += s.stitch_count;
  sum.trim_count += s.trim_count;
  sum.largest_free_bytes = std::max(sum.largest_free_bytes, s.largest_free_bytes);
  sum.capacity_bytes += s.capacity_bytes;
  sum.device_total_bytes += s.device_total_bytes;
  sum.step = s.step;
}

// Runs `fn` on one started device, or on every started one for device -1.
template <typename Fn>
void OnDevices(int device, Fn fn) {
  if (device < 0) {
    ForEachStartedDevice(fn);
  } else if (DeviceState* s = StartedDevice(device)) {
    fn(*s);
  }
}

int ApplyCapacity(int device, std::uint64_t bytes) {
  DeviceState* s = StartedDevice(device);
  if (s == nullptr) {
    SetPendingCapacity(device, bytes);
    return 0;
  }
  std::lock_guard<std::mutex> lock(s->mu);
  s->capacity = bytes;
  s->backend.set_capacity(bytes);
  // A cap below what is held now would only bite at the next growth: release the cache
  // so that the device holds no more than the cap whenever the live blocks allow it.
  if (s->allocator->stats().reserved_bytes > bytes) s->allocator->EmptyCache();
  return 0;
}

// Out of the hot path: the reason for a failed allocation, left for gpumem_last_error.
[[gnu::cold, gnu::noinline]] void* AllocationFailed(DeviceState& s, int device, ssize_t size,
                                                    const absl::Status& status) {
  std::string message;
  const bool out_of_memory = absl::IsResourceExhausted(status);
  if (out_of_memory) {
    gpumem::OomReport report = s.allocator->last_oom();
    message = absl::StrCat("gpumem: device ", device, ": ", report.ToString());
    ExplainAllocatorOom(s, report, message);  // before the caller raises: it may be fatal
  } else {
    message = absl::StrCat("gpumem: device ", device, ": allocation of ", size,
                           " bytes failed: ", status.message());
    std::fprintf(stderr, "%s\n", message.c_str());
  }
  SetError(message, out_of_memory);
  return nullptr;
}

// The first allocation on a device starts it; a device that cannot start says why.
[[gnu::cold, gnu::noinline]] DeviceState* StartDevice(int device) {
  absl::StatusOr<DeviceState*> state = GetDevice(device);
  if (state.ok()) return *state;
  ReportStartError(device, state.status());
  return nullptr;
}

void* Allocate(ssize_t size, int device, struct CUstream_st* stream, gpumem::PoolId pool) {
  if (size < 0) {
    SetError(absl::StrCat("gpumem_alloc: negative size ", size));
    return nullptr;
  }
  DeviceState* s = StartedDevice(device);
  if (s == nullptr && (s = StartDevice(device)) == nullptr) return nullptr;
  gpumem::Recorder::CallScope call_stack(TraceRecorder());  // before the allocator's lock
  const auto stream_id = reinterpret_cast<gpumem::StreamId>(stream);
  const auto bytes = static_cast<std::size_t>(size);
  // The default pool straight to Allocate: one virtual call on the hot path, not two.
  absl::StatusOr<gpumem::DevicePtr> ptr =
      pool == gpumem::kDefaultPool ? s->allocator->Allocate(bytes, stream_id)
                                   : s->allocator->AllocateInPool(bytes, stream_id, pool);
  if (ptr.ok()) return reinterpret_cast<void*>(*ptr);
  return AllocationFailed(*s, device, size, ptr.status());
}

// What gpumem_alloc_or_throw throws: PyTorch's own first words for an out of memory, so
// that code matching "CUDA out of memory" in a RuntimeError still recognises it.
[[noreturn, gnu::cold, gnu::noinline]] void ThrowAllocationFailed(ssize_t size, int device) {
  if (!t_last_error_was_oom) throw std::runtime_error(t_last_error);
  throw std::runtime_error(absl::StrCat(
      "CUDA out of memory. Tried to allocate ", size, " bytes on device ", device, ". ",
      t_last_error,
      " (a RuntimeError, not torch.OutOfMemoryError: gpumem runs without "
      "libgpumem_torch.so)"));
}

// A free that names no device: with one device started (the common case) that one,
// else the device whose allocator owns the block.
void FreeOnOwner(gpumem::DevicePtr p) {
  if (DeviceState* s = SoleStartedDevice()) {
    s->allocator->Free(p);
    return;
  }
  bool freed = false;
  ForEachStartedDevice([&](DeviceState& s) {
    if (!freed) freed = s.allocator->FreeIfOwned(p);
  });
  if (!freed) {
    std::fprintf(stderr, "gpumem: free of %p: not a live gpumem block\n",
                 reinterpret_cast<void*>(p));
  }
}

gpumem_detailed_stats_t ToC(const gpumem::DetailedStats& d) {
  gpumem_detailed_stats_t out{};
  gpumem::ForEachStatField(d, out, [](const auto& in, auto& to) {
    if constexpr (std::is_same_v<std::decay_t<decltype(in)>, std::int64_t>) {
      to = in;
    } else {
      for (int k = 0; k < 3; ++k) to[k] = {in[k].current, in[k].peak, in[k].allocated, in[k].freed};
    }
  });
  return out;
}

gpumem_segment_t ToC(const gpumem::LayoutSegment& s) {
  gpumem_segment_t out{};
  out.address = s.address;
  out.total_size = s.total_size;
  out.allocated_size = s.allocated_size;
  out.requested_size = s.requested_size;
  out.stream = s.stream;
  out.pool = s.pool;
  out.block_count = static_cast<uint32_t>(s.blocks.size());
  out.is_small = s.is_small ? 1 : 0;
  return out;
}

gpumem_block_t ToC(const gpumem::LayoutBlock& b) {
  gpumem_block_t out{};
  out.address = b.address;
  out.size = b.size;
  out.requested_size = b.requested;
  out.state = static_cast<int32_t>(b.state);
  return out;
}

std::string Gib(std::uint64_t bytes) { return absl::StrFormat("%.3f GiB", bytes / 1073741824.0); }

}  // namespace
}  // namespace gpumem::hooks

using gpumem::hooks::DeviceState;
namespace h = gpumem::hooks;

extern "C" {

void* gpumem_alloc(ssize_t size, int device, struct CUstream_st* stream) {
  return h::Allocate(size, device, stream, gpumem::kDefaultPool);
}

void* gpumem_alloc_or_throw(ssize_t size, int device, struct CUstream_st* stream) {
  void* p = h::Allocate(size, device, stream, gpumem::kDefaultPool);
  if (p == nullptr && size != 0) h::ThrowAllocationFailed(size, device);
  return p;
}

void* gpumem_alloc_in_pool(ssize_t size, int device, struct CUstream_st* stream,
                           uint64_t pool) {
  return h::Allocate(size, device, stream, pool);
}

void* gpumem_alloc_at(void* address, ssize_t size, int device, struct CUstream_st* stream,
                      uint64_t pool) {
  DeviceState* s = h::StartedDevice(device);
  if (s == nullptr || size <= 0) {
    h::SetError(absl::StrCat("gpumem_alloc_at: device ", device, " has not started or size ",
                             size, " is not positive"));
    return nullptr;
  }
  absl::StatusOr<gpumem::DevicePtr> ptr =
      s->allocator->AllocateAt(reinterpret_cast<gpumem::DevicePtr>(address),
                               static_cast<std::size_t>(size),
                               reinterpret_cast<gpumem::StreamId>(stream), pool);
  if (!ptr.ok()) {
    h::SetError(absl::StrCat("gpumem_alloc_at: ", ptr.status().message()));
    return nullptr;
  }
  return reinterpret_cast<void*>(*ptr);
}

void gpumem_free(void* ptr, ssize_t, int device, struct CUstream_st*) {
  if (ptr == nullptr) return;
  h::ipc::Forget(ptr);
  const auto p = reinterpret_cast<gpumem::DevicePtr>(ptr);
  if (device < 0) {
    h::FreeOnOwner(p);
    return;
  }
  DeviceState* s = h::StartedDevice(device);
  if (s == nullptr) {
    std::fprintf(stderr, "gpumem: free of %p on device %d, which gpumem never started\n",
                 ptr, device);
    return;
  }
  s->allocator->Free(p);
}

void gpumem_record_stream(void* ptr, int device, struct CUstream_st* stream) {
  if (ptr == nullptr) return;
  const auto p = reinterpret_cast<gpumem::DevicePtr>(ptr);
  const auto st = reinterpret_cast<gpumem::StreamId>(stream);
  bool owned = false;
  if (device < 0) {
    // The caller did not say which device: the one whose allocator owns the block.
    h::ForEachStartedDevice([&](DeviceState& s) {
      if (!owned) owned = s.allocator->RecordStream(p, st);
    });
  } else if (DeviceState* s = h::StartedDevice(device)) {
    owned = s->allocator->RecordStream(p, st);
  }
  if (!owned) {
    std::fprintf(stderr, "gpumem: record_stream(%p): not a live gpumem block\n", ptr);
  }
}

void gpumem_init(int) {}

void gpumem_empty_cache(int device) {
  h::OnDevices(device, [](DeviceState& s) {
    s.allocator->EmptyCache();
  });
}

void gpumem_release_idle(int device) {
  h::OnDevices(device, [](DeviceState& s) { s.allocator->ReleaseIdle(); });
}

void gpumem_keep_headroom(int device) {
  h::OnDevices(device, [](DeviceState& s) { s.allocator->KeepHeadroom(); });
}

int gpumem_calling_driver(void) {
#ifdef GPUMEM_HAVE_CUDA
  return gpumem::cuda::InGpumemDriverCall() ? 1 : 0;
#else
  return 0;
#endif
}

int gpumem_set_memory_fraction(double fraction, int device) {
  if (!(fraction > 0.0 && fraction <= 1.0) || device < 0 || device >= h::kMaxDevices) {
    h::SetError(absl::StrCat("gpumem_set_memory_fraction(", fraction, ", ", device,
                             "): expected a fraction in (0, 1] and a device in [0, ",
                             h::kMaxDevices, ")"));
    return -1;
  }
  DeviceState* s = h::StartedDevice(device);
  if (s == nullptr) {
    h::SetPendingFraction(device, fraction);
    return 0;
  }
  return h::ApplyCapacity(
      device, static_cast<std::uint64_t>(fraction * s->backend.device_total_bytes));
}

int gpumem_set_capacity(uint64_t bytes, int device) {
  if (bytes == 0 || device < 0 || device >= h::kMaxDevices) {
    h::SetError(absl::StrCat("gpumem_set_capacity(", bytes, ", ", device,
                             "): expected bytes > 0 and a device in [0, ", h::kMaxDevices,
                             ")"));
    return -1;
  }
  return h::ApplyCapacity(device, bytes);
}

int gpumem_enable_peer_access(int device, int peer) {
  absl::StatusOr<DeviceState*> state = h::GetDevice(device);
  if (!state.ok()) {
    h::SetError(std::string(state.status().message()));
    return -1;
  }
  if (absl::Status s = (*state)->backend.backend->GrantPeerAccess(peer); !s.ok()) {
    h::SetError(absl::StrCat("gpumem_enable_peer_access(", device, ", ", peer, "): ",
                             s.message()));
    return -1;
  }
  return 0;
}

size_t gpumem_ipc_share(void* ptr, size_t size, int device, char* buf, size_t len,
                        size_t* offset) {
  size_t at = 0;
  absl::StatusOr<std::string> handle = h::ipc::Share(device, ptr, size, &at);
  if (!handle.ok()) {
    h::SetError(absl::StrCat("sharing a CUDA tensor with another process: ",
                             handle.status().message()));
    return 0;
  }
  if (buf == nullptr || handle->size() > len) {
    h::SetError(absl::StrCat("gpumem_ipc_share: the handle takes ", handle->size(), " bytes"));
    return 0;
  }
  std::memcpy(buf, handle->data(), handle->size());
  if (offset != nullptr) *offset = at;
  return handle->size();
}

void* gpumem_ipc_open(const char* handle, size_t len) {
  absl::StatusOr<void*> base =
      h::ipc::Open(absl::string_view(handle == nullptr ? "" : handle, handle ? len : 0));
  if (!base.ok()) {
    h::SetError(absl::StrCat("opening a CUDA tensor sent by another process: ",
                             base.status().message()));
    return nullptr;
  }
  return *base;
}

int gpumem_ipc_close(void* base) {
  if (absl::Status s = h::ipc::Close(base); !s.ok()) {
    h::SetError(absl::StrCat("gpumem_ipc_close: ", s.message()));
    return -1;
  }
  return 0;
}

int gpumem_stats(int device, gpumem_stats_t* out) {
  if (out == nullptr) return -1;
  *out = gpumem_stats_t{};
  bool any = false;
  h::OnDevices(device, [&](DeviceState& s) {
    h::Add(*out, h::StatsOf(s));
    any = true;
  });
  out->step = h::g_step.load();
  return any ? 0 : -1;
}

void gpumem_reset_peaks(int device) {
  h::OnDevices(device, [](DeviceState& s) {
    s.allocator->ResetPeaks();
  });
}

size_t gpumem_memory_summary(int device, char* buf, size_t len) {
  std::string text;
  h::OnDevices(device, [&](DeviceState& s) {
    std::uint64_t thread_cached = 0;
    gpumem_stats_t st = h::StatsOf(s, &thread_cached);
    double frag = st.reserved_bytes == 0
                      ? 0.0
                      : 100.0 * (1.0 - static_cast<double>(st.allocated_bytes) /
                                           static_cast<double>(st.reserved_bytes));
    absl::StrAppendFormat(
        &text,
        "gpumem device %d (%s backend, cap %s of %s, pages of %s)\n"
        "  %-12s %16s %16s\n"
        "  %-12s %16s %16s\n"
        "  %-12s %16s %16s\n"
        "  unused share of reserved %.2f%%; active blocks %d; largest free piece %s; "
        "free in per-thread caches %s\n"
        "  allocs %d, frees %d, out-of-memory %d, stitches %d, trims %d, steps %d\n",
        s.device, s.backend.name, h::Gib(st.capacity_bytes), h::Gib(st.device_total_bytes),
        absl::StrFormat("%d MiB", s.page_bytes >> 20), "", "current", "peak", "allocated",
        h::Gib(st.allocated_bytes),
        h::Gib(st.peak_allocated_bytes), "reserved", h::Gib(st.reserved_bytes),
        h::Gib(st.peak_reserved_bytes), frag, st.active_blocks,
        h::Gib(st.largest_free_bytes), h::Gib(thread_cached),
        st.alloc_count, st.free_count, st.oom_count, st.stitch_count, st.trim_count, st.step);
  });
  if (text.empty()) text = "gpumem: no device has started (nothing allocated yet)\n";
  return h::CopyOut(text, buf, len);
}

size_t gpumem_snapshot_json(int device, char* buf, size_t len) {
  nlohmann::json devices = nlohmann::json::array();
  h::OnDevices(device, [&](DeviceState& s) {
    std::uint64_t thread_cached = 0;
    gpumem_stats_t st = h::StatsOf(s, &thread_cached);
    gpumem::BackendCounters c = s.backend.backend->counters();
    devices.push_back({
        {"device", s.device},
        {"backend", s.backend.name},
        {"allocated_bytes", st.allocated_bytes},
        {"peak_allocated_bytes", st.peak_allocated_bytes},
        {"reserved_bytes", st.reserved_bytes},
        {"peak_reserved_bytes", st.peak_reserved_bytes},
        {"active_blocks", st.active_blocks},
        {"alloc_count", st.alloc_count},
        {"free_count", st.free_count},
        {"oom_count", st.oom_count},
        {"stitch_count", st.stitch_count},
        {"trim_count", st.trim_count},
        {"largest_free_bytes", st.largest_free_bytes},
        // Not in gpumem_stats_t, whose size callers compile in: here and in the summary.
        {"private_pools_free_bytes", s.allocator->stats().private_pools_free_bytes},
        {"thread_cached_bytes", thread_cached},
        {"cross_stream_lends", s.allocator->stats().cross_stream_lends},
        {"cross_stream_borrows", s.allocator->stats().cross_stream_borrows},
        {"capacity_bytes", st.capacity_bytes},
        {"device_total_bytes", st.device_total_bytes},
        {"page_bytes", s.page_bytes},
        {"backend_counters",
         {{"physical_bytes", c.physical_bytes},
          {"peak_physical_bytes", c.peak_physical_bytes},
          {"mapped_bytes", c.mapped_bytes},
          {"reserved_va_bytes", c.reserved_va_bytes},
          {"segment_bytes", c.segment_bytes},
          {"physical_creates", c.physical_creates},
          {"physical_releases", c.physical_releases},
          {"maps", c.maps},
          {"unmaps", c.unmaps},
          {"segment_allocs", c.segment_allocs},
          {"segment_frees", c.segment_frees},
          {"synchronizes", c.synchronizes},
          {"stream_waits", c.stream_waits},
          {"host_call_ns", c.host_call_ns},
          {"background_call_ns", c.background_call_ns}}},
    });
  });
  nlohmann::json doc = {{"step", h::g_step.load()}, {"devices", devices}};
  return h::CopyOut(doc.dump(), buf, len);
}

size_t gpumem_last_oom(int device, char* buf, size_t len) {
  std::string text;
  if (DeviceState* s = h::StartedDevice(device)) {
    if (s->allocator->stats().oom_count > 0) text = s->allocator->last_oom().ToString();
  }
  return h::CopyOut(text, buf, len);
}

size_t gpumem_outside_leak(int device, char* buf, size_t len) {
  return h::CopyOut(h::OutsideLeakVerdict(device), buf, len);
}

uint64_t gpumem_private_pools_free(int device) {
  DeviceState* s = h::StartedDevice(device);
  return s == nullptr ? 0 : s->allocator->stats().private_pools_free_bytes;
}

int gpumem_explain_oom(int device, const gpumem_oom_figures_t* figures) {
  if (figures == nullptr) return -1;
  return static_cast<int>(h::ExplainOom(device, *figures));
}

uint64_t gpumem_step(void) {
  std::uint64_t step = h::g_step.fetch_add(1) + 1;
  h::TraceStep(step);
  h::SampleStepTotals(step);
  return step;
}

void gpumem_note_cuda_in_forked_child(const char* what) { h::NoteCudaInForkedChild(what); }

uint64_t gpumem_trace_events(void) {
  gpumem::Recorder* recorder = h::TraceRecorder();
  return recorder == nullptr ? 0 : recorder->ring().recorded();
}

const char* gpumem_backend_name(int device) {
  DeviceState* s = h::StartedDevice(device);
  return s == nullptr ? "" : s->backend.name.c_str();
}

size_t gpumem_config_error(char* buf, size_t len) {
  const absl::StatusOr<h::Config>& config = h::ProcessConfig();
  if (config.ok()) {
    h::CopyOut("", buf, len);
    return 0;
  }
  return h::CopyOut(absl::StrCat("gpumem: ", config.status().message()), buf, len);
}

int gpumem_profile_start(void) {
  const absl::StatusOr<h::Config>& config = h::ProcessConfig();
  if (!config.ok()) {
    h::SetError(absl::StrCat("gpumem: ", config.status().message()));
    return -1;
  }
  absl::StatusOr<gpumem::Recorder*> recorder = h::StartProfileRecorder(*config);
  if (!recorder.ok()) {
    h::SetError(absl::StrCat("gpumem: ", recorder.status().message()));
    return -1;
  }
  return 0;
}

int gpumem_tracing(void) {
  const gpumem::Recorder* recorder = h::TraceRecorder();
  return recorder != nullptr && !recorder->paused() ? 1 : 0;
}

void gpumem_trace_pause(int paused) {
  if (gpumem::Recorder* recorder = h::TraceRecorder()) recorder->SetPaused(paused != 0);
}

void gpumem_set_native_unwinder(gpumem_unwinder_t unwinder) {
  gpumem::SetNativeUnwinder(unwinder);
}

uint32_t gpumem_capture_stack(void) {
  gpumem::Recorder* recorder = h::TraceRecorder();
  if (recorder == nullptr) return 0;
  // Called before PyTorch takes its allocator's lock: the passes found so far are said now.
  recorder->PrintPassWarnings();
  if (recorder->paused()) return 0;
  // Skip this entry point: the stack starts at its caller.
  return recorder->CaptureStack(0, 1, /*may_take_gil=*/true);
}

void gpumem_record_event(int type, int device, uint64_t addr, uint64_t size, uint64_t stream,
                         uint32_t stack_id, uint64_t extra) {
  gpumem::Recorder* recorder = h::TraceRecorder();
  if (recorder == nullptr || (type == GPUMEM_EVENT_ALLOC && recorder->paused())) return;
  using gpumem::format::RecordType;
  switch (type) {
    case GPUMEM_EVENT_ALLOC:
    case GPUMEM_EVENT_FREE:
    case GPUMEM_EVENT_MAP:
    case GPUMEM_EVENT_UNMAP:
    case GPUMEM_EVENT_SEGMENT_ALLOC:
    case GPUMEM_EVENT_SEGMENT_FREE:
      recorder->RecordWithStack(static_cast<RecordType>(type), device, addr, size, stream,
                                stack_id);
      return;
    case GPUMEM_EVENT_OOM:
      recorder->RecordWithStack(RecordType::kOom, device, addr, size, stream, stack_id, extra);
      return;
    default:
      return;
  }
}

uint32_t gpumem_autograd_node_frame(const char* name) {
  gpumem::Recorder* recorder = h::TraceRecorder();
  return recorder == nullptr || name == nullptr ? 0 : recorder->AutogradNodeFrame(name);
}

void gpumem_set_autograd_link(uint64_t seq, uint64_t thread, uint32_t node_frame) {
  gpumem::Recorder::SetAutogradLink(seq, static_cast<std::uint32_t>(thread), node_frame);
}

int gpumem_detailed_stats(int device, gpumem_detailed_stats_t* out) {
  if (out == nullptr) return -1;
  *out = gpumem_detailed_stats_t{};
  DeviceState* s = h::StartedDevice(device);
  if (s == nullptr) return -1;
  *out = h::ToC(s->allocator->detailed_stats());
  return 0;
}

void gpumem_reset_accumulated(int device) {
  h::OnDevices(device, [](DeviceState& s) { s.allocator->ResetAccumulated(); });
}

void gpumem_capture_begin(int device) {
  // A capture may come before the first allocation: the device starts here.
  absl::StatusOr<DeviceState*> state = h::GetDevice(device);
  if (!state.ok()) {
    h::ReportStartError(device, state.status());
    return;
  }
  (*state)->allocator->BeginCapture();
}

void gpumem_capture_end(int device) {
  if (DeviceState* s = h::StartedDevice(device)) s->allocator->EndCapture();
}

void gpumem_release_pool(int device, uint64_t pool) {
  h::OnDevices(device, [pool](DeviceState& s) { s.allocator->ReleasePool(pool); });
}

void gpumem_empty_pool_cache(int device, uint64_t pool) {
  h::OnDevices(device, [pool](DeviceState& s) { s.allocator->EmptyPoolCache(pool); });
}

size_t gpumem_pool_live_blocks(int device, uint64_t pool, void** out, size_t max) {
  DeviceState* s = h::StartedDevice(device);
  if (s == nullptr) return 0;
  const std::vector<gpumem::DevicePtr> live = s->allocator->PoolLiveBlocks(pool);
  for (size_t i = 0; i < live.size() && i < max && out != nullptr; ++i) {
    out[i] = reinterpret_cast<void*>(live[i]);
  }
  return live.size();
}

int gpumem_block_device(void* ptr) {
  if (ptr == nullptr) return -1;
  const auto p = reinterpret_cast<gpumem::DevicePtr>(ptr);
  int owner = -1;
  h::ForEachStartedDevice([&](DeviceState& s) {
    if (owner < 0 && s.allocator->Owns(p)) owner = s.device;
  });
  return owner;
}

size_t gpumem_layout(int device, gpumem_segment_t* segments, size_t max_segments,
                     gpumem_block_t* blocks, size_t max_blocks, size_t* block_total) {
  if (block_total != nullptr) *block_total = 0;
  DeviceState* s = h::StartedDevice(device);
  if (s == nullptr) return 0;
  const std::vector<gpumem::LayoutSegment> layout = s->allocator->Layout();
  size_t b = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    if (segments != nullptr && i < max_segments) segments[i] = h::ToC(layout[i]);
    for (const gpumem::LayoutBlock& block : layout[i].blocks) {
      if (blocks != nullptr && b < max_blocks && i < max_segments) blocks[b] = h::ToC(block);
      ++b;
    }
  }
  if (block_total != nullptr) *block_total = b;
  return layout.size();
}

size_t gpumem_last_error(char* buf, size_t len) {
  std::string last;
  {
    std::lock_guard<std::mutex> lock(h::g_error_mu);
    last = h::g_last_error;
  }
  return h::CopyOut(last, buf, len);
}

}  // extern "C"
