// gpumem's caching allocator: the policy behind the "gpumem" name. It composes
//   SmallPool   size classes, slabs carved from the medium heap   (<= small_limit)
//   LargePool   best fit, split / coalesce, growth and stitching, two heaps per stream:
//               medium (blocks up to medium_limit, the slabs) and large (the rest)
//   PageHeap    physical pages, virtual ranges, segments
//   StreamGuard cross-stream frees wait for their events
// behind one lock, with per-thread caches (ThreadCache) in front of it. Reserved memory
// grows only when no held page can serve a request: free blocks first, then idle pages
// remapped where they are needed, then new pages; under pressure every cached byte is
// released before an OOM is reported, and after one. A headroom of device memory is kept
// free for the libraries that allocate outside the allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "allocator/backend.h"
#include "allocator/device_allocator.h"
#include "allocator/observer.h"

namespace gpumem {

struct CachingAllocatorOptions {
  int device = 0;                          // reported in observer events
  AllocatorObserver* observer = nullptr;   // told of alloc/free/map/unmap/oom; may be null
  // Virtual bytes reserved per range, the room a range has to grow in place. 0: the
  // device capacity, at most 4 GiB. Address space is cheap; physical pages are the cost.
  std::size_t range_va_bytes = 0;
  // Before creating pages, remap idle pages (whole free pages) from elsewhere. Off: new
  // pages are created and idle ones are reclaimed only when the device is full.
  bool stitch = true;
  // The unit of physical memory and of mapping, a multiple of the device's granularity
  // (2 MiB on NVIDIA GPUs); 0: the granularity. Each page costs the same driver calls
  // whatever its size (an H100, per page: create 10 us, map 2, access 27, unmap 17,
  // release 11; tests/gpu/vmm_call_costs.py), so larger pages make growth and stitching
  // cheaper, but waste up to a page per range and stitch coarser under a cap. The hooks
  // ask for a share of the device (DefaultPageBytes, allocator/page_size.h: 8 MiB on an
  // 80 GB card); replays and tests keep the granularity unless told.
  std::size_t page_bytes = 0;
  // A large request that the stream's own heap cannot fit takes another stream's free
  // block of the same pool where one fits, before anything grows: no page moves. The
  // stream waits (on the device, not the host) for the work that may still use the block
  // (the lender's up to the block's last use there, and earlier borrowers'); at its free
  // the block is back in the lender's heap, fenced by an event on the borrower's stream
  // that the lender waits for (on the device) if it uses that memory again before the
  // borrower's work ran. FSDP2's all-gather and reduce-scatter buffers
  // then come from the compute stream's free memory every step instead of remapping
  // pages between the streams' heaps. Off: growth only.
  bool borrow = true;
  // Lent pages' old addresses are unmapped on a thread of the allocator's own
  // (BackgroundUnmapper) once their work is done, instead of at the next growth on the
  // thread that allocates: ~40 % of what a stitch costs that thread. Off where calls must
  // happen in a known order (replays on the simulated device).
  bool background_unmap = false;
  // Stitching costs a map and a later unmap per page (and, for another stream's pages, a
  // full synchronize, which stalls the host's run-ahead). So growth creates new pages while
  // reserved stays within a budget: (1 + new_page_headroom) x the peak allocated so far,
  // plus every byte stitched so far (a layout that needed stitching in one step needs it in
  // the next: the budget learns that), at most (1 + max_new_page_headroom) x the peak and
  // never past the capacity. Past the budget, idle pages are stitched. A steady loop thus
  // settles into a layout that maps, unmaps and synchronizes nothing. Measured on the real
  // traces (docs/allocator.md): 1.25 % / 1.75 % leave no unmap in the second half of
  // gpt2, resnet50 and leaky_mlp, at ratios <= 1.017; negative values: always stitch.
  double new_page_headroom = 0.0125;
  double max_new_page_headroom = 0.0175;
  // The most that budget ever stops at is at least this many pages above the peak: a
  // small working set (a few hundred MiB), whose 1.75 % is under one block it needs, would
  // otherwise stitch that block every step (a few driver calls on a step of a
  // millisecond or two).
  std::size_t min_budget_pages = 16;
  // Device memory kept free for the rest of the process (cuBLAS and cuDNN handles and
  // workspaces, NCCL communicators, ...), as the driver counts it (Backend::
  // DeviceFreeBytes, asked only when growth is about to create memory). When creating
  // would leave less, every idle page is given back first and growth maps from them. A
  // request that still needs the reserve is refused (an OOM that says so): the reserve
  // is for allocations that fail far less clearly. 0: off, no query.
  std::uint64_t headroom_bytes = 0;
  // Requests up to this size (at most 1 MiB) come from size-class slabs; larger ones are
  // carved exactly (512 B rounding) by best fit (in which heap: medium_limit). Measured
  // on the real traces, classes above 64 KiB (up to 6.25 % rounding, one block per slab)
  // cost more memory than best fit does.
  std::size_t small_limit = std::size_t{64} << 10;
  // Blocks above small_limit and up to this size, and the slabs, come from a heap of
  // their own per stream (the medium heap; PyTorch's small pool ends at 1 MiB too), apart
  // from the larger blocks. Carved from the same free blocks as large ones that come and
  // go, such blocks, kept, pin the pages those leave: a k-means loop keeping 800 KB a
  // pass beside a 195 MiB matrix needed 1.29x its peak, 1.002x with the heap. Borrowing
  // is between heaps of one kind, and the growth budget counts each kind's peak. At most
  // small_limit (0 included): no medium heap.
  std::size_t medium_limit = std::size_t{1} << 20;
  // Empty slabs are a warm cache: up to this many bytes of them (per allocator) may stay
  // while the allocator grows; beyond it, or when the device is full, they are released
  // before growing. 0: always released first (tightest, but slabs churn: the small-pair
  // benchmark costs ~105 ns instead of ~65 ns; resnet50's replay ratio 1.0129 vs 1.0155).
  std::size_t slab_cache_bytes = std::size_t{8} << 20;
  // Per-thread caches in front of the lock (docs/allocator.md, "Thread caches"): a thread
  // reuses blocks it freed without the allocator's lock, so alloc+free pairs scale across
  // threads. Cached blocks are drained back before any growth, trim or OOM report, so they
  // never cause one. Off, or with an observer set, every call takes the lock.
  bool thread_cache = true;
  // Caches start when threads keep contending for the lock: at least
  // thread_cache_contended_calls of a window of thread_cache_lock_window locked calls found
  // it held. A thread that does not wait is cheaper locked than cached (allocator_bench
  // small x1: ~45 ns locked, more cached), and PyTorch's forward and autograd threads,
  // which take turns, keep the replays' layouts. True: from the first call.
  bool thread_cache_single_thread = false;
  std::uint32_t thread_cache_lock_window = 1024;
  std::uint32_t thread_cache_contended_calls = 16;
  // Blocks kept per (stream, block size) bin: a thread that frees a few same-sized blocks
  // and allocates them again (a layer's activations) reuses them all.
  std::size_t thread_cache_bin_entries = 4;
  // Bytes a thread's cache may hold; one block of any size is always kept, so a loop over
  // one large block (256 MiB included) hits. 64 MiB holds every 64 KiB - 1 MiB bin of a
  // thread cycling through all of them (allocator_bench small) and is nothing on a device;
  // more would only keep more memory out of coalescing between drains.
  std::size_t thread_cache_bytes = std::size_t{64} << 20;
};

std::unique_ptr<DeviceAllocator> MakeCachingAllocator(Backend& backend,
                                                      CachingAllocatorOptions options = {});

}  // namespace gpumem
