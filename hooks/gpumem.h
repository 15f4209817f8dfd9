/* gpumem's C ABI: the only door into libgpumem.so. gpumem_alloc / gpumem_free have the
 * signatures that torch.cuda.memory.CUDAPluggableAllocator loads; the rest serve the
 * Python package (ctypes), the libtorch helper and tests. One allocator per device,
 * created on first use, thread-safe. Device -1 means "every device started so far" where
 * a function says so. Text functions follow snprintf: they write at most `len` bytes
 * (NUL included) and return the length the whole text needs. */
#ifndef GPUMEM_HOOKS_GPUMEM_H_
#define GPUMEM_HOOKS_GPUMEM_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* cudaStream_t is struct CUstream_st* */

#define GPUMEM_API __attribute__((visibility("default")))

/* A block of `size` bytes for `stream` on `device`, or NULL when out of memory (after
 * releasing cached memory and defragmenting; the report is printed unless
 * GPUMEM_LOG_OOM=0 and kept for gpumem_last_oom) or when gpumem cannot start (bad
 * GPUMEM_* value, no device: see gpumem_config_error). `stream` must stay valid as long
 * as gpumem runs, as PyTorch's pooled streams do: a block freed on it may later go to
 * another stream, which is then ordered after its work by an event recorded on it. */
GPUMEM_API void* gpumem_alloc(ssize_t size, int device, struct CUstream_st* stream);
/* gpumem_alloc for PyTorch's CUDAPluggableAllocator wired from Python (where
 * libgpumem_torch.so is missing): PyTorch uses the pointer it gets unchecked, so a NULL
 * would become a tensor without memory (an illegal address at its first kernel). Where
 * gpumem_alloc returns NULL for a size other than 0 this throws a C++ std::runtime_error
 * instead, starting "CUDA out of memory." for an out of memory, which PyTorch raises as a
 * RuntimeError. For C++ callers that catch exceptions only. */
GPUMEM_API void* gpumem_alloc_or_throw(ssize_t size, int device, struct CUstream_st* stream);
/* Returns a block from gpumem_alloc or gpumem_alloc_in_pool; `size`, `device` and
 * `stream` are as allocated (`size` and `stream` are not used).
 * device -1: the block's own device is found (a deleter that knows only the pointer): with
 * one device started that device, else the one whose allocator owns the block (a pointer
 * no device owns is reported on stderr). */
GPUMEM_API void gpumem_free(void* ptr, ssize_t size, int device, struct CUstream_st* stream);
/* The block is also used on `stream` (Tensor.record_stream): it is not reused until the
 * work queued there when it is freed has run. device -1: find the block's device. */
GPUMEM_API void gpumem_record_stream(void* ptr, int device, struct CUstream_st* stream);

/* PyTorch's init hook; starts nothing (allocators start on first use). */
GPUMEM_API void gpumem_init(int device_count);
/* Releases every cached byte that no live block uses (torch.cuda.empty_cache). */
GPUMEM_API void gpumem_empty_cache(int device);
/* Something outside gpumem failed to get device memory (a library's cuMemAlloc or
 * cudaMalloc, seen by the CUPTI tracer): gives back what no live block uses so that its
 * retry succeeds. Safe to call from a callback on gpumem's own driver calls (it then does
 * nothing: gpumem releases and retries by itself); -1: every started device. */
GPUMEM_API void gpumem_release_idle(int device);
/* Something outside gpumem just got device memory (seen by the CUPTI tracer): where the
 * driver now has less free than GPUMEM_HEADROOM, gives idle memory back so that the rest
 * of that library's allocations (an NCCL communicator's buffers) find room. */
GPUMEM_API void gpumem_keep_headroom(int device);
/* 1 while this thread is inside gpumem's own driver call (cuMemCreate, cuMemRelease...):
 * a CUPTI tracer leaves those out of "memory outside the allocator". */
GPUMEM_API int gpumem_calling_driver(void);
/* Caps the device at `fraction` of its memory / at `bytes`. 0 on success, -1 on a bad
 * argument (the reason: gpumem_last_error). Before the device starts,
 * the cap waits for it. */
GPUMEM_API int gpumem_set_memory_fraction(double fraction, int device);
GPUMEM_API int gpumem_set_capacity(uint64_t bytes, int device);
/* Lets device `peer` read and write `device`'s memory, mapped now and from here on, once
 * peer access between the two is enabled (cudaDeviceEnablePeerAccess): a copy between
 * their tensors then works as with cudaMalloc's memory (VMM mappings carry access device
 * by device). Starts `device` if it has not started. 0 on success, -1 with the reason in
 * gpumem_last_error. */
GPUMEM_API int gpumem_enable_peer_access(int device, int peer);

/* CUDA tensors sent to another process (torch.multiprocessing; PyTorch's shareIpcHandle
 * and getIpcDevPtr). gpumem_ipc_share writes the handle of the `size`-byte block at `ptr`
 * on `device` (device < 0, size 0: the live block's own) to `buf` (at most `len` bytes)
 * and returns its length, 0 on error
 * (gpumem_last_error says why); `*offset` is where `ptr` lies past the address that
 * gpumem_ipc_open returns for that handle in the receiving process, which must run
 * gpumem's allocator too and stay on this machine. The sender must keep the block until
 * the receiver has opened it (PyTorch's reference counting does). gpumem_ipc_close
 * unmaps what gpumem_ipc_open mapped; 0 on success. */
#define GPUMEM_IPC_HANDLE_MAX 256
GPUMEM_API size_t gpumem_ipc_share(void* ptr, size_t size, int device, char* buf, size_t len,
                                   size_t* offset);
GPUMEM_API void* gpumem_ipc_open(const char* handle, size_t len);
GPUMEM_API int gpumem_ipc_close(void* base);

typedef struct gpumem_stats_s {
  uint64_t allocated_bytes;      /* live blocks, bytes as requested */
  uint64_t peak_allocated_bytes;
  uint64_t reserved_bytes;       /* device memory held */
  uint64_t peak_reserved_bytes;
  uint64_t active_blocks;
  uint64_t alloc_count;
  uint64_t free_count;
  uint64_t oom_count;
  uint64_t stitch_count;
  uint64_t trim_count;
  uint64_t largest_free_bytes;
  uint64_t capacity_bytes;       /* the cap in force */
  uint64_t device_total_bytes;   /* the device's memory (the simulated one for sim) */
  uint64_t step;                 /* gpumem_step calls so far */
} gpumem_stats_t;

/* Fills `out` for `device` (or the sum over started devices for -1; peaks summed).
 * 0 on success, -1 if the device has not started (out is zeroed). */
GPUMEM_API int gpumem_stats(int device, gpumem_stats_t* out);
GPUMEM_API void gpumem_reset_peaks(int device);
/* A short table of the figures above, for people. */
GPUMEM_API size_t gpumem_memory_summary(int device, char* buf, size_t len);
/* The same figures and the backend's counters as one JSON object. */
GPUMEM_API size_t gpumem_snapshot_json(int device, char* buf, size_t len);
/* The report of the device's last failed allocation; empty if none. */
GPUMEM_API size_t gpumem_last_oom(int device, char* buf, size_t len);
/* Where memory a library of this process holds outside the allocator on `device` grew
 * step by step (NCCL's with a process group made each step, a CUDA extension's), as the
 * CUPTI tracer counted it: the lines of that verdict ("gpumem:   verdict: leak outside the
 * allocator: ...", "gpumem:   fix: ..."); empty otherwise, and without the tracer. */
GPUMEM_API size_t gpumem_outside_leak(int device, char* buf, size_t len);
/* Bytes reserved and free inside private pools (CUDA graphs, torch.cuda.MemPool still
 * alive), which only allocations into those pools can use; 0 if the device has not
 * started. */
GPUMEM_API uint64_t gpumem_private_pools_free(int device);
/* An out-of-memory in PyTorch's own allocator (profile-only mode: its OOM observer calls
 * this before the exception is raised). Any figure may be 0 for unknown: gpumem fills what
 * it knows (live bytes and the cap from the trace; under gpumem's allocator, its own). */
typedef struct {
  uint64_t requested_bytes;
  uint64_t allocated_bytes;
  uint64_t reserved_bytes;
  uint64_t largest_free_bytes;
  uint64_t capacity_bytes;
  uint64_t driver_free_bytes;
} gpumem_oom_figures_t;
/* Prints the verdict to stderr (unless GPUMEM_LOG_OOM=0): leak, fragmentation or genuine
 * peak with its evidence, the top live sites with their growth per step (while a trace
 * records; else a hint to set GPUMEM_TRACE), and the fix; flushes the trace. gpumem's own
 * allocator does this by itself when it refuses a request. Returns 0 leak,
 * 1 fragmentation, 2 genuine peak; -1 when `figures` is NULL. */
GPUMEM_API int gpumem_explain_oom(int device, const gpumem_oom_figures_t* figures);
/* Marks the end of a training step; returns the number of steps so far. */
GPUMEM_API uint64_t gpumem_step(void);
/* Events recorded into the trace (GPUMEM_TRACE) so far; 0 without a trace. Each is in
 * the file once its recording call returned: a reader of this process's file, even
 * after a SIGKILL, finds at least as many events as a call made before the kill saw. */
GPUMEM_API uint64_t gpumem_trace_events(void);
/* CUDA is about to be used in a child forked from a process that had CUDA (DataLoader
 * workers under fork): prints the problem and the fix to stderr and, with GPUMEM_TRACE
 * set, records them in a trace of the child's own (the name with this pid for %p, else
 * with `.child-PID` appended). Once per process. The Python package calls it from
 * torch.cuda's lazy init in such a child, where PyTorch refuses before any driver call. */
GPUMEM_API void gpumem_note_cuda_in_forked_child(const char* what);
/* The backend a device runs on ("vmm", "cudamalloc", "sim"); "" if not started. */
GPUMEM_API const char* gpumem_backend_name(int device);
/* Checks the GPUMEM_* configuration: 0 if usable, else the length of the message
 * naming the bad variable and the accepted values (written to buf). */
GPUMEM_API size_t gpumem_config_error(char* buf, size_t len);
/* The last failure this process's C callers were only told about by NULL or -1
 * (an out-of-memory report, a device that cannot start, a bad argument). */
GPUMEM_API size_t gpumem_last_error(char* buf, size_t len);

/* --- Completing PyTorch's allocator interface (libgpumem_torch's CUDAPluggableAllocator
 * subclass). Index 0 of each array is every block, 1 the small pool (size-class slabs),
 * 2 the large pool, as in PyTorch's StatArray. */
typedef struct gpumem_stat_s {
  int64_t current;
  int64_t peak;
  int64_t allocated; /* cumulative: added since the last reset of accumulated figures */
  int64_t freed;
} gpumem_stat_t;

typedef struct gpumem_detailed_stats_s {
  gpumem_stat_t allocation[3];      /* live blocks (counts) */
  gpumem_stat_t segment[3];         /* mapped extents / segments (counts) */
  gpumem_stat_t active[3];          /* live blocks and blocks whose free waits for streams */
  gpumem_stat_t allocated_bytes[3]; /* bytes of live blocks as requested */
  gpumem_stat_t reserved_bytes[3];  /* device memory held */
  gpumem_stat_t active_bytes[3];
  gpumem_stat_t requested_bytes[3];
  int64_t num_alloc_retries;        /* allocations that had to release cache or stitch */
  int64_t num_ooms;
  int64_t num_device_alloc;         /* physical pages created / segments obtained */
  int64_t num_device_free;
} gpumem_detailed_stats_t;

/* Fills `out` for one started device; 0, or -1 if it has not started or device < 0 (out
 * zeroed). gpumem counts a block's bytes as requested in allocated_bytes, requested_bytes
 * and active_bytes alike (carved sizes: gpumem_layout). Current and cumulative figures
 * are exact; so are the peaks of index 0. The small and large peaks of allocation,
 * allocated/requested/active bytes and active are sampled (when the total's peak rises,
 * while frees wait for streams, and at each read), so they may miss a short-lived peak of
 * one kind; reserved and segment peaks are sampled after every growth and new slab.
 * segment counts virtual ranges holding pages (segments without VMM) as large and slabs
 * as small. docs/allocator.md, Detailed stats. */
GPUMEM_API int gpumem_detailed_stats(int device, gpumem_detailed_stats_t* out);
/* Sets the cumulative figures (allocated, freed) to 0 (reset_accumulated_memory_stats). */
GPUMEM_API void gpumem_reset_accumulated(int device);

/* Private pools: CUDA graph capture and torch.cuda.MemPool. A pool is a number other than
 * 0 (0: the default pool, as gpumem_alloc). Blocks of a pool are never given to another
 * pool's requests, and its memory is never lent, stitched or released while the pool is
 * in use. They are freed with gpumem_free; they never sit in per-thread caches. NULL when
 * out of memory, as gpumem_alloc. Allocating in a released pool puts it in use again. */
GPUMEM_API void* gpumem_alloc_in_pool(ssize_t size, int device, struct CUstream_st* stream,
                                      uint64_t pool);
/* While a capture is under way on the device (begin/end nest), the allocator makes no
 * call that would break it: no event query, no synchronize, no unmap; cross-stream frees
 * wait for the end of the last capture. Requests are served from free blocks and new
 * pages only: one that would need stitching or trimming fails (NULL) instead.
 * gpumem_empty_cache and gpumem_empty_pool_cache do nothing meanwhile, and pools released
 * meanwhile are returned at the end. capture_begin starts the device if needed. */
GPUMEM_API void gpumem_capture_begin(int device);
GPUMEM_API void gpumem_capture_end(int device);
/* The pool's owner is gone: its cached memory is released now if none of its blocks is
 * live, else when the last one is freed (or at the next gpumem_empty_cache, which then
 * releases its free memory). Blocks waiting for other streams count as live. */
GPUMEM_API void gpumem_release_pool(int device, uint64_t pool);
/* Releases the pool's cached memory that no live block uses (emptyCache(mempool)). */
GPUMEM_API void gpumem_empty_pool_cache(int device, uint64_t pool);
/* Writes up to `max` addresses of the pool's live blocks (address order); returns how
 * many there are. */
GPUMEM_API size_t gpumem_pool_live_blocks(int device, uint64_t pool, void** out, size_t max);
/* Allocates the pool's block at exactly `address` (the range [address, address + size)
 * must be free memory of that pool on that stream): how a checkpointed pool state is
 * restored (CUDA graph trees). NULL if that memory is not free in the pool. */
GPUMEM_API void* gpumem_alloc_at(void* address, ssize_t size, int device,
                                 struct CUstream_st* stream, uint64_t pool);
/* The device that owns `ptr` (a live block), or -1. */
GPUMEM_API int gpumem_block_device(void* ptr);

/* The memory layout, for snapshots in PyTorch's format: segments in address order, each
 * followed by its blocks (free ones included) in address order; a segment's blocks cover
 * it exactly. A segment is a maximal run of mapped memory outside slabs (a cudaMalloc'd
 * segment without VMM), or a slab (is_small, its size-class slots as blocks, neighbouring
 * free slots as one block). Blocks held free in per-thread caches show as free. */
typedef struct gpumem_segment_s {
  uint64_t address;
  uint64_t total_size;
  uint64_t allocated_size; /* bytes of live blocks, as carved */
  uint64_t requested_size; /* bytes of live blocks, as requested */
  uint64_t stream;
  uint64_t pool;
  uint32_t block_count;    /* the blocks that follow in gpumem_layout's block array */
  int32_t is_small;        /* a slab of size-class slots */
} gpumem_segment_t;
typedef struct gpumem_block_s {
  uint64_t address;
  uint64_t size;
  uint64_t requested_size; /* 0 for a free block */
  int32_t state;           /* 0 free, 1 allocated, 2 freed, waiting for other streams */
  int32_t reserved_;
} gpumem_block_t;
/* Fills up to max_segments / max_blocks (blocks only of segments that fit); returns the
 * number of segments there are and sets *block_total to the number of blocks, so a caller
 * can retry with room enough (the layout may change in between). 0 for a device that has
 * not started. */
GPUMEM_API size_t gpumem_layout(int device, gpumem_segment_t* segments, size_t max_segments,
                                gpumem_block_t* blocks, size_t max_blocks,
                                size_t* block_total);

/* --- Recording another allocator (profile-only mode) and autograd links. Used by
 * libgpumem_torch.so; see docs/profiler.md. Event types are the trace's record types. */
enum {
  GPUMEM_EVENT_ALLOC = 1,
  GPUMEM_EVENT_FREE = 2,
  GPUMEM_EVENT_MAP = 3,
  GPUMEM_EVENT_UNMAP = 4,
  GPUMEM_EVENT_OOM = 5, /* size = request, extra = the device's free bytes */
  GPUMEM_EVENT_SEGMENT_ALLOC = 7,
  GPUMEM_EVENT_SEGMENT_FREE = 8,
};
/* Opens the trace (GPUMEM_TRACE, else gpumem-%p.gpumem) if it is not open: 0, or -1
 * with the reason in gpumem_last_error (a bad GPUMEM_* variable, an unwritable file). */
GPUMEM_API int gpumem_profile_start(void);
/* 1 once a trace is open in this process (GPUMEM_TRACE, or profile-only mode) and not
 * paused, else 0. */
GPUMEM_API int gpumem_tracing(void);
/* Pauses (1) or resumes (0) recording blocks: one allocated while paused is left out with
 * its free; frees of blocks allocated while recording, maps and steps are still recorded.
 * For measuring the recording's cost within one process. */
GPUMEM_API void gpumem_trace_pause(int paused);
/* Native stacks (GPUMEM_STACKS=native|all) come from `unwinder` instead of glibc's
 * backtrace(): it fills `pcs` with up to `max` return addresses of the calling thread,
 * innermost first, and returns how many. NULL restores backtrace(). libgpumem_torch
 * installs PyTorch's cached unwinder (torch::unwind). */
typedef size_t (*gpumem_unwinder_t)(void** pcs, size_t max);
GPUMEM_API void gpumem_set_native_unwinder(gpumem_unwinder_t unwinder);
/* The calling thread's stack id in GPUMEM_STACKS mode (0: none, or no trace open). A
 * Python thread that released the GIL takes it back to read its frames: never call this
 * while holding a lock that a thread holding the GIL may wait for. */
GPUMEM_API uint32_t gpumem_capture_stack(void);
/* Records one event with a stack id from gpumem_capture_stack (0: none). No-op without
 * an open trace; an unknown type is ignored. */
GPUMEM_API void gpumem_record_event(int type, int device, uint64_t addr, uint64_t size,
                                    uint64_t stream, uint32_t stack_id, uint64_t extra);
/* The frame id naming a backward node ("MmBackward0"); 0 without an open trace. */
GPUMEM_API uint32_t gpumem_autograd_node_frame(const char* name);
/* Links the calling thread's next allocation to autograd: `seq` is the forward op's
 * sequence number (forward threads, node_frame 0) or the running backward node's, and
 * `thread` PyTorch's id of the forward thread (docs/trace-format.md, record type 12). */
GPUMEM_API void gpumem_set_autograd_link(uint64_t seq, uint64_t thread, uint32_t node_frame);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_HOOKS_GPUMEM_H_ */
