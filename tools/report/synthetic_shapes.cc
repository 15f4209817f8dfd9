#include "tools/report/synthetic_shapes.h"

#include <vector>

#include "tools/report/synthetic_builder.h"

namespace gpumem::report::synthetic {
namespace {

using trace::CapacitySource;
using trace::StepSource;

constexpr std::uint64_t kBase = 0x7e0000000000ull;

// Hands out addresses and counts what is allocated; an allocation past the cap becomes
// an OOM record instead.
class Device {
 public:
  Device(Builder* b, std::uint64_t cap) : b_(b), cap_(cap) {}

  // The block's address, or 0 after recording an OOM.
  std::uint64_t Alloc(std::uint64_t size, std::uint32_t stack) {
    if (allocated_ + size > cap_) {
      b_->Oom(size, cap_ - allocated_);
      return 0;
    }
    const std::uint64_t addr = next_;
    next_ += size;
    allocated_ += size;
    b_->Alloc(addr, size, stack);
    return addr;
  }
  void Free(std::uint64_t addr, std::uint64_t size, std::uint32_t stack) {
    allocated_ -= size;
    b_->Free(addr, size, stack);
  }

 private:
  Builder* b_;
  std::uint64_t cap_;
  std::uint64_t allocated_ = 0;
  std::uint64_t next_ = kBase;
};

}  // namespace

trace::Trace NoFitTrace() {
  Builder b;
  Device d(&b, kCapacity);
  const std::uint32_t params = b.Stack(10, "build_model");
  auto layer = [&](int line) {
    return b.Stack({{"model.py", line, "Block.forward"}, {"model.py", 90, "GPT.forward"},
                    {"train.py", 30, "train_step"}});
  };
  const std::uint32_t qkv = layer(50), scores = layer(52), mlp = layer(55);
  d.Alloc(200 * kMiB, params);
  for (int l = 0; l < 24; ++l) {
    if (d.Alloc(20 * kMiB, qkv) == 0) break;
    const std::uint64_t tmp = d.Alloc(10 * kMiB, scores);
    if (tmp == 0) break;
    d.Free(tmp, 10 * kMiB, scores);
    if (d.Alloc(20 * kMiB, mlp) == 0) break;
  }
  return b.Take();
}

trace::Trace ValidationLeakTrace(bool marks) {
  Builder b;
  Device d(&b, kCapacity);
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t train = b.Stack({{"model.py", 40, "Net.forward"}, {"train.py", 30, "train_step"}});
  const std::uint32_t val = b.Stack({{"model.py", 40, "Net.forward"}, {"train.py", 77, "validate"}});
  const std::uint32_t loss = b.Stack(32, "train_step");
  d.Alloc(471 * kMiB, params);
  for (int step = 0;; ++step) {
    std::vector<std::uint64_t> acts;
    for (int i = 0; i < 8; ++i) {
      const std::uint64_t a = d.Alloc(48 * kMiB, train);
      if (a == 0) return b.Take();
      acts.push_back(a);
    }
    const std::uint64_t l = d.Alloc(4096, loss);
    if (l == 0) return b.Take();
    d.Free(l, 4096, loss);
    for (std::uint64_t a : acts) d.Free(a, 48 * kMiB, train);  // backward
    if (marks) b.Step(StepSource::kOptimizerHook);
    // Validation: the summed loss keeps a part of each batch's graph alive.
    for (int i = 0; i < 3; ++i) d.Free(d.Alloc(16 * kMiB, val), 16 * kMiB, val);
    d.Alloc(kValidationLeakPerStep, val);
  }
}

trace::Trace LateLeakTrace() {
  Builder b;
  Device d(&b, kCapacity);
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t act = b.Stack({{"model.py", 40, "Net.forward"}, {"train.py", 30, "train_step"}});
  const std::uint32_t kept = b.Stack({{"model.py", 40, "Net.forward"}, {"train.py", 90, "evaluate"}});
  d.Alloc(471 * kMiB, params);
  for (int step = 0;; ++step) {
    const std::uint64_t a = d.Alloc(32 * kMiB, act);
    if (a == 0) return b.Take();
    d.Free(a, 32 * kMiB, act);
    if (step >= kLateLeakStart && d.Alloc(kLateLeakPerStep, kept) == 0) return b.Take();
    b.Step(StepSource::kOptimizerHook);
  }
}

trace::Trace GrowingBatchTrace() {
  Builder b;
  Device d(&b, kCapacity);
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t batch = b.Stack(41, "fit");
  const std::uint32_t act = b.Stack(42, "fit");
  d.Alloc(256 * kMiB, params);
  for (std::uint64_t step = 0;; ++step) {
    const std::uint64_t size = 8 * kMiB + step * kWarmupGrowthPerStep;
    const std::uint64_t x = d.Alloc(size, batch);
    const std::uint64_t a = x == 0 ? 0 : d.Alloc(4 * size, act);
    if (a == 0) return b.Take();
    d.Free(a, 4 * size, act);  // backward
    const std::uint64_t out = d.Alloc(size, batch);
    if (out == 0) return b.Take();
    b.Step(StepSource::kOptimizerHook);  // inside fit: its batch and output still live
    d.Free(out, size, batch);
    d.Free(x, size, batch);
  }
}

trace::Trace StairLeakTrace() {
  Builder b;
  Device d(&b, kCapacity);
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t out = b.Stack(70, "train");
  d.Alloc(256 * kMiB, params);
  for (int step = 0;; ++step) {
    const std::uint64_t o = d.Alloc(kStairLeakBytes, out);
    if (o == 0) return b.Take();
    const std::uint64_t a = d.Alloc(64 * kMiB, out);
    if (a == 0) return b.Take();
    d.Free(a, 64 * kMiB, out);
    b.Step(StepSource::kOptimizerHook);
    if (step % kStairLeakPeriod != 0) d.Free(o, kStairLeakBytes, out);
  }
}

trace::Trace ConcatenatedHistoryTrace() {
  Builder b;
  Device d(&b, kCapacity);
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t act = b.Stack(40, "train");
  const std::uint32_t log = b.Stack(75, "log");
  d.Alloc(256 * kMiB, params);
  std::uint64_t history = 0, history_size = 0;
  for (;;) {
    const std::uint64_t a = d.Alloc(64 * kMiB, act);
    if (a == 0) return b.Take();
    d.Free(a, 64 * kMiB, act);
    b.Step(StepSource::kOptimizerHook);
    const std::uint64_t longer = d.Alloc(history_size + kConcatGrowthPerStep, log);
    if (longer == 0) return b.Take();
    if (history != 0) d.Free(history, history_size, log);
    history = longer;
    history_size += kConcatGrowthPerStep;
  }
}

trace::Trace CappedPeakTrace() {
  Builder b;
  b.NoHeaderCapacity();
  b.Capacity(kCapacity, CapacitySource::kDeviceTotal);
  b.Capacity(512 * kMiB, CapacitySource::kMemoryFraction);
  Device d(&b, 512 * kMiB);
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t act = b.Stack(40, "train_step");
  d.Alloc(128 * kMiB, params);
  for (int step = 0; step < 4; ++step) {
    const int count = step < 3 ? 4 : 8;  // the fourth batch is twice as long
    std::vector<std::uint64_t> acts;
    for (int i = 0; i < count; ++i) {
      const std::uint64_t a = d.Alloc(64 * kMiB, act);
      if (a == 0) return b.Take();
      acts.push_back(a);
    }
    for (std::uint64_t a : acts) d.Free(a, 64 * kMiB, act);
    b.Step(StepSource::kOptimizerHook);
  }
  return b.Take();
}

trace::Trace RecoveredOomsTrace(bool fatal_end) {
  Builder b;
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t conv = b.Stack(60, "train_step");
  const std::uint32_t act = b.Stack(40, "train_step");
  b.Segment(kBase, 896 * kMiB);  // PyTorch's cache: held from the first step on
  b.Alloc(kBase, 128 * kMiB, params);
  const std::uint64_t ws = kBase + 128 * kMiB;
  const std::uint64_t acts = ws + 64 * kMiB;
  for (int step = 0; step < 20; ++step) {
    for (int k = 0; step < 4 && k < 21; ++k) b.Oom(4096 * kMiB, 128 * kMiB);
    b.Alloc(ws, 64 * kMiB, conv);
    for (int i = 0; i < 4; ++i) b.Alloc(acts + i * 64 * kMiB, 64 * kMiB, act);
    for (int i = 0; i < 4; ++i) b.Free(acts + i * 64 * kMiB, 64 * kMiB, act);
    b.Free(ws, 64 * kMiB, conv);
    b.Step(StepSource::kOptimizerHook);
  }
  if (fatal_end) b.Oom(2048 * kMiB, 128 * kMiB);
  return b.Take();
}

}  // namespace gpumem::report::synthetic
