// Device-memory calls outside the allocator that failed: cuBLAS, cuDNN, NCCL, cuFFT asking
// the driver for memory it did not have (gpumem traces record them through CUPTI). The
// library then reports its own error (CUBLAS_STATUS_ALLOC_FAILED, an "unhandled cuda
// error"), which never says memory; when such a failure ends the trace, it is the verdict.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/report/sites.h"
#include "tools/report/steps.h"
#include "tools/report/timeline.h"
#include "tools/trace/trace.h"

namespace gpumem::report {

struct FailedOutside {
  trace::FailedAllocation call;
  std::string error_name;
  std::size_t step = 0;  // 0-based
  std::string site;
  // The allocator's state at the last timeline sample before the call: what it held idle
  // in its cache is what the call could not get.
  std::uint64_t allocated = 0;
  std::uint64_t reserved = 0;
  std::uint64_t idle = 0;
  bool ended_the_run = false;
};

// Every failed call in time order, the main trace's and its CUPTI trace's (`cupti`, or
// null; where the CUPTI tracer writes them); the last one ended the run when nothing but
// a dying process's unwinding comes after it (no step end, no OOM, few allocations).
// Where none did, the library error a dying process named in its note is the last.
std::vector<FailedOutside> ListFailedOutside(const trace::Trace& trace, const trace::Trace* cupti,
                                             const SiteTable& sites, const Steps& steps,
                                             const Timeline& timeline);

// "cuMemAlloc of 32 MiB", or "NCCL error (size not recorded)" where only the dying
// process's note names the failure.
std::string FailedCall(const FailedOutside& f);
// "cuMemAlloc of 32 MiB failed (CUDA_ERROR_OUT_OF_MEMORY) in step 21 at train.py:12 f"
std::string DescribeFailedOutside(const FailedOutside& f);
// The evidence and fix for a failure that ended the run.
std::string FailedOutsideEvidence(const FailedOutside& f);
std::string FailedOutsideFix();

}  // namespace gpumem::report
