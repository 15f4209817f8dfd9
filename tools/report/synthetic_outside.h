// A data-parallel rank's trace with memory outside the allocator and known answers: the
// allocator's segments, device memory NCCL, cuBLAS, cuDNN, another library and an
// unnamed caller took through the driver (CUPTI records), the allocator's own driver calls
// (which must not count), pinned host memory, and step ends with the driver's figures.
#pragma once

#include <cstdint>
#include <string>

#include "tools/trace/trace.h"

namespace gpumem::report::synthetic {

struct OutsideAnswer {
  static constexpr std::uint64_t kMiB = 1ull << 20;
  static constexpr std::uint64_t kGiB = 1ull << 30;
  static constexpr std::uint64_t kTotal = 80 * kGiB;
  static constexpr std::uint64_t kReserved = 8 * kGiB;
  static constexpr std::uint64_t kNccl = 2 * kGiB;
  static constexpr std::uint64_t kNcclPeakExtra = 1 * kGiB;  // a buffer held over step 3 only
  static constexpr std::uint64_t kCublas = 256 * kMiB;
  static constexpr std::uint64_t kCudnn = 128 * kMiB;
  static constexpr std::uint64_t kOther = 32 * kMiB;
  static constexpr std::uint64_t kUnknown = 64 * kMiB;
  static constexpr std::uint64_t kPinned = 512 * kMiB;
  static constexpr std::uint64_t kContext = 600 * kMiB;  // the driver counts it, nobody records it
  static constexpr std::uint64_t kSteps = 5;
  static constexpr std::uint64_t kPeakStep = 3;

  static constexpr std::uint64_t Outside() { return kNccl + kCublas + kCudnn + kOther + kUnknown; }
  static constexpr std::uint64_t UsedAtEnd() { return kReserved + Outside() + kContext; }
};

// Steps 1..5, each ending with the driver's figures; with `oom`, an OOM after the last step
// end that the driver's free bytes go with. Everything on `device`.
trace::Trace OutsideAllocatorTrace(bool oom, std::int32_t device = 0);

// The same run as two traces of one process, lined up by their clock origins: gpumem's
// (segments, steps) and the CUPTI tracer's (the driver calls), which opened 0.5 s later.
trace::Trace OutsideMainTrace();
trace::Trace OutsideCuptiTrace();

// A library's driver allocation made before every step end and never freed: by default
// an extension's cuMemAlloc of 256 MiB at ext.py:12 through libext.so.
struct KeptEachStep {
  std::string api = "cuMemAlloc_v2";
  std::string library_file = "libext.so";
  std::string library_function = "ext_alloc";
  std::string file = "ext.py";  // empty: the library's own thread, no user's line
  std::int32_t line = 12;
  std::string function = "scratch";
  std::uint64_t bytes = 256ull << 20;
};

// Adds those calls before every step end of `main` to the CUPTI trace `cupti` (lined up
// with `main` by clock origin); returns their stack id.
std::uint32_t AddKeptEachStep(const trace::Trace& main, const KeptEachStep& kept_calls,
                              trace::Trace* cupti);
// OutsideCuptiTrace with those calls before every step end of `main`: a leak outside the
// allocator. `stack`: the calls' stack id.
trace::Trace OutsideCuptiTraceOfALibraryThatKeeps(const trace::Trace& main,
                                                   const KeptEachStep& kept_calls,
                                                   std::uint32_t* stack);
// The extension's (KeptEachStep's defaults).
trace::Trace OutsideCuptiTraceOfAnExtensionThatKeeps(const trace::Trace& main,
                                                     std::uint32_t* stack);

}  // namespace gpumem::report::synthetic
