// Debian's libabsl_raw_hash_set instantiates find_first_non_full without NDEBUG: each
// insert into a flat_hash_map then calls ShouldInsertBackwards (debug-only probe
// entropy). Where GCC does not inline it, every insert into the allocator's live-block
// map pays for that (callgrind, one alloc+free pair through the C ABI on the sim
// backend: 931 instructions, 888 with this). An instance of our own, built with NDEBUG,
// is the one the allocator's code binds to.
#include "absl/container/internal/raw_hash_set.h"

#if defined(NDEBUG)
template absl::container_internal::FindInfo absl::container_internal::find_first_non_full<void>(
    const absl::container_internal::ctrl_t*, size_t, size_t);
#endif
