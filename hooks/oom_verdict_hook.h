// The verdict at an out-of-memory, in the dying process (profiler/oom_verdict.h): from
// gpumem's allocator when it refuses a request, or from PyTorch's OOM observer in
// profile-only mode (gpumem_explain_oom). With a trace open the recorder names the sites;
// without one, the device totals sampled at each step mark give the growth.
#pragma once

#include <cstdint>
#include <string>

#include "allocator/device_allocator.h"
#include "hooks/device_registry.h"
#include "hooks/gpumem.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::hooks {

// gpumem's allocator refused `report` on `s`.
// `headline` (the one-line OOM report) comes before the full verdict, not before the
// counted repeats of one step.
void ExplainAllocatorOom(DeviceState& s, const OomReport& report, const std::string& headline);
// PyTorch's allocator (or any caller) ran out on `device`; 0 figures are unknown.
report::OomClass ExplainOom(int device, const gpumem_oom_figures_t& figures);
// Where a library of this process (NCCL, an extension) held memory outside the allocator
// on `device` that grew over the step ends: that verdict's lines, for a library's error
// that is an out-of-memory (python/gpumem/_exit_oom.py); empty otherwise.
std::string OutsideLeakVerdict(int device);
// A step ended: samples each started device's allocated bytes (the growth a verdict
// without a trace uses).
void SampleStepTotals(std::uint64_t step);

}  // namespace gpumem::hooks
