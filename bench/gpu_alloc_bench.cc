// Warm alloc+free pairs on a GPU: gpumem (libgpumem.so's C ABI) against cudaMalloc /
// cudaFree, cudaMallocAsync / cudaFreeAsync (the device's default pool) and, where built
// with Torch, PyTorch's native caching allocator (raw_alloc / raw_delete). Sizes 512 B to
// 256 MiB, 1 and 8 threads. tests/gpu/bench_table.py turns the JSON output into the
// README's table of ratios (peer time / gpumem time, same size and threads, same run).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include "benchmark/benchmark.h"
#include "hooks/gpumem.h"

#ifdef GPUMEM_BENCH_TORCH
#include <ATen/ATen.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorName(e));
    std::exit(1);
  }
}

struct Gpumem {
  static void* Alloc(std::size_t n) { return gpumem_alloc(static_cast<ssize_t>(n), 0, nullptr); }
  static void Free(void* p, std::size_t n) { gpumem_free(p, static_cast<ssize_t>(n), 0, nullptr); }
};
struct CudaMalloc {
  static void* Alloc(std::size_t n) {
    void* p = nullptr;
    Check(cudaMalloc(&p, n), "cudaMalloc");
    return p;
  }
  static void Free(void* p, std::size_t) { Check(cudaFree(p), "cudaFree"); }
};
struct CudaMallocAsync {
  static void* Alloc(std::size_t n) {
    void* p = nullptr;
    Check(cudaMallocAsync(&p, n, nullptr), "cudaMallocAsync");
    return p;
  }
  static void Free(void* p, std::size_t) { Check(cudaFreeAsync(p, nullptr), "cudaFreeAsync"); }
};
#ifdef GPUMEM_BENCH_TORCH
struct TorchNative {
  static void* Alloc(std::size_t n) { return c10::cuda::CUDACachingAllocator::raw_alloc(n); }
  static void Free(void* p, std::size_t) { c10::cuda::CUDACachingAllocator::raw_delete(p); }
};
#endif

template <typename A>
void BM_AllocFreePair(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  Check(cudaSetDevice(0), "cudaSetDevice");
  A::Free(A::Alloc(n), n);  // warm: the first pair may create the memory
  for (auto _ : state) {
    void* p = A::Alloc(n);
    if (p == nullptr) {
      state.SkipWithError("allocation failed");
      break;
    }
    benchmark::DoNotOptimize(p);
    A::Free(p, n);
  }
  state.SetItemsProcessed(state.iterations());
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (long n : {512L, 64L << 10, 1L << 20, 16L << 20, 256L << 20}) b->Arg(n);
  b->Threads(1)->Threads(8)->UseRealTime()->MinTime(0.2);
}

BENCHMARK_TEMPLATE(BM_AllocFreePair, Gpumem)->Apply(Sizes);
BENCHMARK_TEMPLATE(BM_AllocFreePair, CudaMalloc)->Apply(Sizes);
BENCHMARK_TEMPLATE(BM_AllocFreePair, CudaMallocAsync)->Apply(Sizes);
#ifdef GPUMEM_BENCH_TORCH
BENCHMARK_TEMPLATE(BM_AllocFreePair, TorchNative)->Apply(Sizes);
#endif

}  // namespace

int main(int argc, char** argv) {
  Check(cudaFree(nullptr), "CUDA start");  // the context, outside every timing
#ifdef GPUMEM_BENCH_TORCH
  // Start PyTorch's CUDA state (and its allocator) outside the timings.
  at::empty({1}, at::TensorOptions().device(at::kCUDA));
#endif
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
