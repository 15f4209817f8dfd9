#include "profiler/driver_symbol.h"

#include <dlfcn.h>

namespace gpumem {

void* DriverSymbol(const char* name) {
  if (void* f = dlsym(RTLD_DEFAULT, name)) return f;
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  void* f = dlsym(handle, name);
  dlclose(handle);  // drops the reference RTLD_NOLOAD took; the driver stays loaded
  return f;
}

}  // namespace gpumem
