#include "tools/report/synthetic.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/report/synthetic_builder.h"

namespace gpumem::report::synthetic {
namespace {

using trace::Action;

constexpr std::uint64_t kBase = 0x7f0000000000ull;

}  // namespace

trace::Trace LeakTrace() {
  Builder b;
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t act = b.Stack(40, "train_step");
  const std::uint32_t leak = b.Stack(42, "train_step");
  std::uint64_t reserved = 0;
  b.Segment(kBase, 128 * kMiB);
  b.Alloc(kBase, 128 * kMiB, params);
  const std::uint64_t act_addr = kBase + 128 * kMiB;
  b.Segment(act_addr, 256 * kMiB);
  reserved = 384 * kMiB;
  std::uint64_t next = kBase + 384 * kMiB;
  for (int step = 0;; ++step) {
    b.Alloc(act_addr, 256 * kMiB, act);
    if (reserved + kLeakPerStep > kCapacity) {
      b.Oom(kLeakPerStep, kCapacity - reserved);
      break;
    }
    b.Segment(next, kLeakPerStep);
    b.Alloc(next, kLeakPerStep, leak);
    reserved += kLeakPerStep;
    next += kLeakPerStep;
    b.Free(act_addr, 256 * kMiB, act);
    b.Step();
  }
  return b.Take();
}

trace::Trace FragmentationTrace() {
  Builder b;
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t act = b.Stack(40, "train_step");
  b.Segment(kBase, 448 * kMiB);
  b.Alloc(kBase, 448 * kMiB, params);
  const std::uint64_t pool = kBase + 448 * kMiB;
  b.Segment(pool, 512 * kMiB);  // reserved: 960 MiB of 1024
  const int kBlocks = 32;
  for (int step = 0; step < 8; ++step) {
    for (int i = 0; i < kBlocks; ++i) b.Alloc(pool + i * 16 * kMiB, 16 * kMiB, act);
    const bool last = step == 7;
    for (int i = 0; i < kBlocks; ++i) {
      if (!last || i % 2 == 0) b.Free(pool + i * 16 * kMiB, 16 * kMiB, act);
    }
    if (last) {
      b.Oom(128 * kMiB, 64 * kMiB);
      break;
    }
    b.Step();
  }
  return b.Take();
}

trace::Trace PeakTrace() {
  Builder b;
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t act = b.Stack(40, "train_step");
  b.Segment(kBase, 256 * kMiB);
  b.Alloc(kBase, 256 * kMiB, params);
  std::uint64_t reserved = 256 * kMiB;
  std::uint64_t next = kBase + 256 * kMiB;
  std::vector<std::uint64_t> blocks;  // cached 64 MiB segments, reused step after step
  for (int step = 0; step < 11; ++step) {
    const int count = step < 10 ? 8 : 13;
    for (int i = 0; i < count; ++i) {
      if (static_cast<std::size_t>(i) == blocks.size()) {
        if (reserved + 64 * kMiB > kCapacity) {
          b.Oom(64 * kMiB, kCapacity - reserved);
          return b.Take();
        }
        b.Segment(next, 64 * kMiB);
        blocks.push_back(next);
        next += 64 * kMiB;
        reserved += 64 * kMiB;
      }
      b.Alloc(blocks[i], 64 * kMiB, act);
    }
    for (int i = 0; i < count; ++i) b.Free(blocks[i], 64 * kMiB, act);
    b.Step();
  }
  return b.Take();
}

trace::Trace FinderThenFailedCublasTrace() {
  Builder b;
  const std::uint32_t params = b.Stack(10, "build_model");
  const std::uint32_t finder = b.Stack(20, "find_batch_size");
  const std::uint32_t act = b.Stack(40, "train_step");
  const std::uint32_t state = b.Stack(45, "train_step");
  const std::uint32_t validate = b.Stack(77, "validate");
  b.Segment(kBase, 256 * kMiB);
  b.Alloc(kBase, 256 * kMiB, params);
  std::uint64_t next = kBase + 256 * kMiB;
  std::uint64_t batch_segment = 0;
  for (std::uint64_t batch = 64 * kMiB; batch <= 256 * kMiB; batch *= 2) {
    b.Segment(next, batch);
    b.Alloc(next, batch, finder);
    b.Free(next, batch, finder);
    batch_segment = next;
    next += batch;
  }
  b.Oom(512 * kMiB, 320 * kMiB);  // reserved 704 MiB of 1024: caught by the finder
  b.Segment(next, 288 * kMiB);      // reserved 992 MiB
  b.Alloc(next, 288 * kMiB, state);
  for (int step = 0; step < 20; ++step) {
    b.Alloc(batch_segment, 256 * kMiB, act);
    b.Free(batch_segment, 256 * kMiB, act);
    b.Step();
  }
  constexpr std::uint32_t kCudaErrorOutOfMemory = 2;
  b.FailedAlloc("cuMemAlloc", kCublasWorkspace, kCudaErrorOutOfMemory, 16 * kMiB, validate);
  return b.Take();
}

trace::Trace LargeTrace(std::size_t events, std::size_t events_per_step, std::size_t sites,
                        std::uint64_t leak_per_step) {
  Builder b;
  b.Reserve(events + events_per_step);
  std::vector<std::uint32_t> stacks;
  for (std::size_t s = 0; s < sites; ++s) {
    stacks.push_back(b.Stack(static_cast<int>(100 + s), absl::StrCat("layer_", s)));
  }
  const std::uint32_t leak = b.Stack(42, "train_step");
  // A step: allocations from every site in turn (an alloc and its free are three events);
  // half are freed at once (temporaries), the rest at the step's end; one block of
  // `leak_per_step` from train.py:42 is never freed.
  const std::size_t allocs_per_step = std::max<std::size_t>(1, events_per_step / 3);
  const std::uint64_t pool = kBase + 4096;
  b.Segment(pool, 1ull << 36);
  std::uint64_t leak_addr = kBase + (1ull << 40);
  struct Block {
    std::uint64_t addr, size;
    std::uint32_t stack;
  };
  std::vector<Block> held;
  while (b.size() < events) {
    held.clear();
    std::uint64_t addr = pool;
    for (std::size_t i = 0; i < allocs_per_step; ++i) {
      const std::uint64_t size = 512 * (1 + (i * 2654435761u) % 4096);
      const std::uint32_t stack = stacks[i % stacks.size()];
      b.Alloc(addr, size, stack);
      if (i % 2 == 1) {
        b.Free(addr, size, stack);
      } else {
        held.push_back({addr, size, stack});
        addr += size;
      }
    }
    b.Segment(leak_addr, leak_per_step);
    b.Alloc(leak_addr, leak_per_step, leak);
    leak_addr += leak_per_step;
    for (const Block& h : held) b.Free(h.addr, h.size, h.stack);
    b.Step();
  }
  return b.Take();
}

}  // namespace gpumem::report::synthetic
