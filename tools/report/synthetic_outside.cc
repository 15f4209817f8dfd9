#include "tools/report/synthetic_outside.h"

#include <algorithm>
#include <string>
#include <vector>

#include "tools/report/synthetic_builder.h"

namespace gpumem::report::synthetic {
namespace {

using trace::Action;
using A = OutsideAnswer;

constexpr std::int64_t kCuptiLateNs = 500'000'000;  // the CUPTI trace opened 0.5 s later

std::uint32_t DriverCall(Builder& b, const std::string& call, const std::string& library,
                         const std::string& symbol) {
  std::vector<trace::Frame> frames = {{"[cuda-driver]", 0, call}};
  if (!library.empty()) {
    frames.push_back({"/usr/local/cuda/lib64/libcudart.so.12", 0, "cudaMalloc+0x51"});
    frames.push_back({library, 0, symbol});
    frames.push_back({"site-packages/torch/lib/libtorch_cuda.so", 0, "at::native::addmm+0x90"});
  }
  return b.RawStack(frames);
}

constexpr std::uint64_t kSegmentBase = 0x7f0000000000;
constexpr char kNcclSo[] = "/usr/lib/x86_64-linux-gnu/libnccl.so.2";

// The allocator's segments: 4 of 2 GiB; the first is also seen by CUPTI as its cudaMalloc.
void AllocatorSegments(Builder& b, std::int32_t device) {
  for (std::uint64_t i = 0; i < 4; ++i) {
    b.AddOn(device, Action::kSegmentAlloc, kSegmentBase + i * A::kReserved / 4, A::kReserved / 4);
  }
}

struct Call {
  std::int32_t device;  // kOnDevice, or -1 for pinned host memory
  Action action;
  std::uint64_t addr;
  std::uint64_t size;
  const char* api;
  const char* library;  // "" = no native frames recorded
  const char* symbol;
};
constexpr std::int32_t kOnDevice = 0x7fffffff;

// What other libraries took, and the allocator's own calls as CUPTI sees them: named by
// its library, or (without native frames) by its segment's address and size.
void DriverCalls(Builder& b, std::int32_t device) {
  const Call calls[] = {
      {kOnDevice, Action::kSegmentAlloc, 0x100, A::kNccl / 2, "cuMemCreate", kNcclSo,
       "ncclCommInitRank+0x1d2"},
      {kOnDevice, Action::kSegmentAlloc, 0x101, A::kNccl / 2, "cuMemCreate", kNcclSo,
       "ncclProxyConnect+0x88"},
      {kOnDevice, Action::kSegmentAlloc, 0x900000000, A::kCublas, "cuMemAlloc_v2",
       "site-packages/nvidia/cublas/lib/libcublasLt.so.12", "cublasLtMatmul+0x12"},
      {kOnDevice, Action::kSegmentAlloc, 0xa00000000, A::kCudnn, "cuMemAlloc_v2",
       "site-packages/nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9", "cudnnBackendExecute+0x3"},
      {kOnDevice, Action::kSegmentAlloc, 0xb00000000, A::kOther, "cuMemAlloc_v2",
       "site-packages/torch/lib/libtorch_cuda.so", "at::cuda::getCurrentCUDABlasHandle+0x40"},
      {kOnDevice, Action::kSegmentAlloc, 0xc00000000, A::kUnknown, "cuMemAlloc_v2", "", ""},
      {-1, Action::kSegmentAlloc, 0xd00000000, A::kPinned, "cuMemHostAlloc", "", ""},
      {kOnDevice, Action::kSegmentAlloc, 0xe00000000, A::kGiB, "cuMemAlloc_v2",
       "site-packages/torch/lib/libc10_cuda.so", "c10::cuda::CUDACachingAllocator::malloc+0x77"},
      {kOnDevice, Action::kSegmentFree, 0xe00000000, A::kGiB, "cuMemFree_v2", "", ""},
      {kOnDevice, Action::kSegmentAlloc, kSegmentBase, A::kReserved / 4, "cuMemAlloc_v2", "", ""},
  };
  for (const Call& c : calls) {
    b.AddOn(c.device == kOnDevice ? device : c.device, c.action, c.addr, c.size,
            DriverCall(b, c.api, c.library, c.symbol));
  }
}

// One step: an activation allocated and freed; NCCL holds an extra buffer over step 3.
void Steps(Builder& b, std::int32_t device) {
  const std::uint32_t act = b.Stack(42, "train_step");
  const std::uint32_t nccl = DriverCall(b, "cuMemCreate", kNcclSo, "ncclGroupEnd+0x10");
  const std::uint32_t release = DriverCall(b, "cuMemRelease", "", "");
  for (std::uint64_t s = 1; s <= A::kSteps; ++s) {
    b.AddOn(device, Action::kAlloc, kSegmentBase, 64 * A::kMiB, act);
    b.AddOn(device, Action::kFreeRequested, kSegmentBase, 64 * A::kMiB, act);
    std::uint64_t used = A::UsedAtEnd();
    if (s == A::kPeakStep) {
      b.AddOn(device, Action::kSegmentAlloc, 0x102, A::kNcclPeakExtra, nccl);
      used += A::kNcclPeakExtra;
    }
    if (s == A::kPeakStep + 1) b.AddOn(device, Action::kSegmentFree, 0x102, 0, release);
    b.StepWithDriver(A::kTotal - used, A::kTotal, device);
  }
}

// The driver calls of `t` (or everything else), shifted by `shift_us`; frames and stacks stay.
trace::Trace Part(const trace::Trace& t, bool driver_calls, std::int64_t shift_us) {
  trace::Trace out = t;
  out.events.clear();
  for (const trace::Event& e : t.events) {
    const bool call = !t.stacks[e.stack_id].empty() &&
                      t.frames[t.stacks[e.stack_id].front()].filename == "[cuda-driver]";
    if (call != driver_calls) continue;
    out.events.push_back(e);
    out.events.back().time_us += shift_us;
  }
  return out;
}

constexpr std::int64_t kOriginNs = 7'000'000'000'000;

}  // namespace

trace::Trace OutsideAllocatorTrace(bool oom, std::int32_t device) {
  Builder b;
  AllocatorSegments(b, device);
  DriverCalls(b, device);
  Steps(b, device);
  if (oom) b.AddOn(device, Action::kOom, 0, A::kTotal);  // asks for the whole device
  trace::Trace t = b.Take();
  if (oom) t.events.back().device_free = A::kTotal - A::UsedAtEnd();
  return t;
}

trace::Trace OutsideMainTrace() {
  trace::Trace t = Part(OutsideAllocatorTrace(false), false, 0);
  t.run.clock_origin_ns = kOriginNs;
  return t;
}

trace::Trace OutsideCuptiTrace() {
  trace::Trace t = Part(OutsideAllocatorTrace(false), true, -kCuptiLateNs / 1000);
  t.run.clock_origin_ns = kOriginNs + kCuptiLateNs;
  t.source = "synthetic.cupti";
  return t;
}

std::uint32_t AddKeptEachStep(const trace::Trace& main, const KeptEachStep& kept_calls,
                              trace::Trace* cupti) {
  const std::int64_t shift = (*cupti->run.clock_origin_ns - *main.run.clock_origin_ns) / 1000;
  const auto frame = static_cast<std::uint32_t>(cupti->frames.size());
  cupti->frames.push_back({"[cuda-driver]", 0, kept_calls.api});
  cupti->frames.push_back({kept_calls.library_file, 0, kept_calls.library_function});
  std::vector<std::uint32_t> frames = {frame, frame + 1};
  if (!kept_calls.file.empty()) {
    cupti->frames.push_back({kept_calls.file, kept_calls.line, kept_calls.function});
    frames.push_back(frame + 2);
  }
  const auto stack = static_cast<std::uint32_t>(cupti->stacks.size());
  cupti->stacks.push_back(std::move(frames));
  std::uint64_t addr = 0x7e0000000000ull + (std::uint64_t{stack} << 36);
  for (const trace::Event& e : main.events) {
    if (e.action != trace::Action::kStep) continue;
    trace::Event kept;
    kept.action = trace::Action::kSegmentAlloc;
    kept.time_us = e.time_us - 5 - shift;
    kept.addr = addr += kept_calls.bytes;
    kept.size = kept_calls.bytes;
    kept.stack_id = stack;
    cupti->events.push_back(kept);
  }
  std::stable_sort(cupti->events.begin(), cupti->events.end(),
                   [](const trace::Event& a, const trace::Event& b) { return a.time_us < b.time_us; });
  return stack;
}

trace::Trace OutsideCuptiTraceOfALibraryThatKeeps(const trace::Trace& main,
                                                   const KeptEachStep& kept_calls,
                                                   std::uint32_t* stack) {
  trace::Trace cupti = OutsideCuptiTrace();
  *stack = AddKeptEachStep(main, kept_calls, &cupti);
  return cupti;
}

trace::Trace OutsideCuptiTraceOfAnExtensionThatKeeps(const trace::Trace& main,
                                                     std::uint32_t* stack) {
  return OutsideCuptiTraceOfALibraryThatKeeps(main, KeptEachStep{}, stack);
}

}  // namespace gpumem::report::synthetic
