// What the CUPTI tracer (libgpumem_cupti.so, which CUDA loads privately through
// CUDA_INJECTION64_PATH) counts as held by each of this process's own libraries outside
// the allocator (NCCL, cuBLAS, cuDNN, the rest: profiler/library_holdings.h), read through
// the functions it exports. The dying process cannot tell that memory apart otherwise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tools/report/library_kind.h"

namespace gpumem::hooks {

struct TracerLibraryHolding {
  std::uint64_t bytes = 0;
  std::string site;  // holding most
};

// Devices 0..63 on which such libraries ever held memory, one bit each; 0 where the
// tracer is not loaded.
std::uint64_t TracerLibraryDevices();
// What `library` holds on `device` now; 0 where the tracer is not loaded.
std::uint64_t TracerLibraryBytes(int device, report::OutsideLibrary library);
// The same with the site holding most of it; nullopt where the tracer is not loaded.
std::optional<TracerLibraryHolding> ReadTracerLibraries(int device,
                                                        report::OutsideLibrary library);

}  // namespace gpumem::hooks
