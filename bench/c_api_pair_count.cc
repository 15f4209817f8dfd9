// Alloc+free pairs through the C ABI (gpumem_alloc / gpumem_free), for counting
// instructions rather than timing them: wall time on the shared machines swings, a
// callgrind count of the same binary does not.
//   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
//   cmake --build build -j2 --target c_api_pair_count
//   GPUMEM_BACKEND=sim valgrind --tool=callgrind build/bin/c_api_pair_count 100000 512
//   GPUMEM_BACKEND=sim valgrind --tool=callgrind build/bin/c_api_pair_count 1 512
// (the difference of the two totals / 99999 is the instructions of one pair: 463 at 0cf66bb,
// 876 at 1cc7ec9, 720 at 337ec4f). Where the rest goes:
//   callgrind_annotate --inclusive=yes callgrind.out.<pid>
// Per size (20001 and 1 pairs, difference / 20000; one thread, so the locked path), before
// and after the large pool's inline index, fused refiling and pending split (a 1 MiB block
// splits a 2 MiB free block and its free merges it back; 16 MiB and up fill whole pages):
//   bytes            512   64 KiB   1 MiB   16 MiB   256 MiB
//   ec4d271 before   463   479      963     699      699
//   after            464   480      594     549      549
// and after the C ABI finds a started device with one inline load and keeps its failure
// paths out of line (1 MiB and 64 KiB not recounted):
//   now              405                    490
#include <cstdio>
#include <cstdlib>

#include "hooks/gpumem.h"

int main(int argc, char** argv) {
  const long pairs = argc > 1 ? std::atol(argv[1]) : 100000;
  const long size = argc > 2 ? std::atol(argv[2]) : 512;
  for (long i = 0; i < pairs; ++i) {
    void* p = gpumem_alloc(size, 0, nullptr);
    if (p == nullptr) {
      std::fprintf(stderr, "gpumem_alloc failed (without a GPU: GPUMEM_BACKEND=sim)\n");
      return 1;
    }
    gpumem_free(p, size, 0, nullptr);
  }
  std::printf("%ld pairs of %ld bytes\n", pairs, size);
  return 0;
}
