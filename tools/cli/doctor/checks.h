// The checks that `gpumem doctor` runs in its own process; the torch-level ones come from
// python/gpumem/doctor.py (python_checks.h).
#pragma once

#include <string>
#include <vector>

#include "tools/cli/doctor/check.h"
#include "tools/cli/doctor/cuda_probe.h"
#include "tools/cli/doctor/processes.h"

namespace gpumem::cli::doctor {

// The driver's CUDA version against the one torch was built with.
Check DriverCheck(const CudaProbe& probe, const TorchFacts& torch);
// The GPUs CUDA sees (after CUDA_VISIBLE_DEVICES), or why none.
Check GpusCheck(const CudaProbe& probe);
// Each GPU's free memory and the other processes holding it.
Check GpuMemoryCheck(const CudaProbe& probe, const ProcessList& processes);
// Virtual memory management, which gpumem's defragmentation needs.
Check VmmCheck(const CudaProbe& probe);

// RLIMIT_MEMLOCK, the pinned (page-locked) host memory a process may hold.
Check PinnedMemoryCheck();
// Several versions of the CUDA runtime (libcudart) or of CUPTI (libcupti) visible at once.
std::vector<Check> LibraryVersionChecks(const TorchFacts& torch);
// libgpumem.so and the CUPTI tracer libgpumem_cupti.so load from `lib_dir`.
Check GpumemLibraryCheck(const std::string& lib_dir);
Check CuptiCheck(const std::string& lib_dir);

}  // namespace gpumem::cli::doctor
