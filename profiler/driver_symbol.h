// A symbol of the CUDA driver already in the process, never loading it.
#pragma once

namespace gpumem {

// The global scope first (as the CUPTI tracer looks it up), else libcuda.so.1 if it is
// loaded (RTLD_NOLOAD never loads it); null where neither has it.
void* DriverSymbol(const char* name);

}  // namespace gpumem
