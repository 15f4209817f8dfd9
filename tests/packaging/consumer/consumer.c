/* Links the installed libgpumem.so through find_package(gpumem): checks the
 * configuration, allocates and frees on device 0 and reads the stats back. */
#include <stdio.h>

#include "hooks/gpumem.h"

int main(void) {
  char err[512];
  if (gpumem_config_error(err, sizeof err) != 0) {
    fprintf(stderr, "gpumem_config_error: %s\n", err);
    return 1;
  }
  void* p = gpumem_alloc(1 << 20, 0, NULL);
  gpumem_stats_t stats;
  if (p == NULL || gpumem_stats(0, &stats) != 0 || stats.allocated_bytes != (1u << 20)) {
    fprintf(stderr, "gpumem: allocation or stats failed\n");
    return 1;
  }
  gpumem_free(p, 1 << 20, 0, NULL);
  printf("backend %s, allocated %llu bytes, then freed\n", gpumem_backend_name(0),
         (unsigned long long)stats.allocated_bytes);
  return 0;
}
