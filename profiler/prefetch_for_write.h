// Asks for a cache line in the state a store needs (owned, others' copies invalidated),
// ahead of the store. The journal's next slot was last read by the writer thread on
// another core: a plain prefetch brings it back shared, and the store then waits for the
// other core's copy to be invalidated, a wait that the allocator's unlock (a locked
// instruction, which drains pending stores) pays on the allocating thread.
// GCC's __builtin_prefetch(p, 1) is such a request only where the target has PREFETCHW
// (-mprfchw), not on the x86-64 baseline: there it emits a read prefetch (prefetcht0).
#pragma once

namespace gpumem {

// Whether this x86-64 processor has PREFETCHW (CPUID 0x80000001, ECX bit 8), read once
// when the library loads. Elsewhere false.
extern const bool kHasPrefetchW;

inline void PrefetchForWrite(const void* p) {
#if defined(__x86_64__)
  if (kHasPrefetchW) {
    asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
    return;
  }
#endif
  __builtin_prefetch(p, /*rw=*/1);  // aarch64: a prefetch for store (PRFM PSTL1KEEP)
}

}  // namespace gpumem
