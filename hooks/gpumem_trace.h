/* What the trace records about a run besides its allocations: what marks the steps and the
 * memory cap in force. For the Python package (which knows about optimizer hooks and
 * torch.cuda.set_per_process_memory_fraction) and for PyTorch integrations. Each call does
 * nothing while no trace is being recorded. docs/trace-format.md, record types 6 and 14. */
#ifndef GPUMEM_TRACE_H_
#define GPUMEM_TRACE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUMEM_TRACE_API __attribute__((visibility("default")))

/* What marks the steps from now on: 1 = gpumem_step() called by the program itself,
 * 2 = the Python package's optimizer step hooks, 3 = its backward-pass marks, 4 = its
 * model-call marks, 5 = its CUDA graph replay marks (loops with no optimizer, or while
 * it stalls), 6 = its model-call marks at calls with grad in train mode before any
 * backward pass (perhaps parts of the first iteration), 0 = not said. Later step records
 * carry it. Returns 0, or -1 for a value out of range. */
GPUMEM_TRACE_API int gpumem_trace_step_source(int source);

/* Steps will be marked, but not yet: a model's first call on the GPU has begun, or a
 * first accumulation window, before the optimizer's first step. The dying process then
 * stops looking for passes in the allocations (a deep model's identical layers, or the
 * micro-batches, would be taken for them), and the trace notes it once
 * ("gpumem: steps coming"), so that the report infers none either. */
GPUMEM_TRACE_API void gpumem_trace_steps_coming(void);

/* The calling thread runs the training loop (a model call, a backward pass, an optimizer
 * step): from now on its allocations are the loop's, not a helper thread's, in the
 * dying process's verdict and in the report (a note in the trace, once per thread).
 * Returns 1 once the note is in the trace, 0 while no trace is open yet. */
GPUMEM_TRACE_API int gpumem_trace_loop_thread(void);

/* The memory cap of `device` from now on, in bytes, and where it came from: 1 = the
 * device's total memory, 2 = GPUMEM_CAPACITY, 3 = set_per_process_memory_fraction,
 * 4 = gpumem_set_capacity. Returns 0, or -1 for a bad argument. */
GPUMEM_TRACE_API int gpumem_trace_capacity(int device, uint64_t bytes, int source);

/* Whether a trace could be recorded where GPUMEM_TRACE says, without creating it (the
 * file opens when the process first uses a device): fills `buf` with why not, "" when it
 * can. snprintf's rules: returns the whole text's length plus 1. */
GPUMEM_TRACE_API size_t gpumem_trace_check(char* buf, size_t len);

/* A note about the run in the trace (an annotation on `device`, -1 for none): e.g. that
 * the process died of an out-of-memory a library reported as its own error. Returns 0,
 * or -1 for a NULL or empty text. */
GPUMEM_TRACE_API int gpumem_trace_note(int device, const char* text);

/* A CUDA graph's private memory pool (PyTorch's MempoolId_t, `pool_a`.`pool_b`) on
 * `device`: 1 = a capture into it begins, 2 = that capture ends, 3 = released (the last
 * graph that used it is gone). Readers count the memory its captures needed as held by
 * the code that made it until it is released. Returns 0, or -1 for a bad argument. */
GPUMEM_TRACE_API int gpumem_trace_graph_pool(int device, int change, uint64_t pool_a,
                                             uint64_t pool_b);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_TRACE_H_ */
