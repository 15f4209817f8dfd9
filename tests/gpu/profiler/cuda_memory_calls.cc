// A plain CUDA C++ program for the CUPTI tracer's proof run: it makes each kind of memory
// call once from a function named after it and prints what it did, one line per call:
//   EXPECT <action> <api> <addr-hex> <size> <function>
// run_cupti_check.sh runs it under libgpumem_cupti.so and checks the trace against these
// lines. Build with -rdynamic so native stacks name the functions.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                              \
  do {                                                                           \
    cudaError_t err_ = (call);                                                   \
    if (err_ != cudaSuccess) {                                                   \
      std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(err_)); \
      std::exit(2);                                                              \
    }                                                                            \
  } while (0)

extern "C" __attribute__((noinline)) void* SiteCudaMalloc(size_t bytes) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, bytes));
  std::printf("EXPECT segment_alloc cudaMalloc %p %zu SiteCudaMalloc\n", p, bytes);
  return p;
}

extern "C" __attribute__((noinline)) void SiteCudaFree(void* p, size_t bytes) {
  CHECK(cudaFree(p));
  std::printf("EXPECT segment_free cudaFree %p %zu SiteCudaFree\n", p, bytes);
}

extern "C" __attribute__((noinline)) void* SiteCudaMallocAsync(size_t bytes, cudaStream_t s) {
  void* p = nullptr;
  CHECK(cudaMallocAsync(&p, bytes, s));
  std::printf("EXPECT segment_alloc cudaMallocAsync %p %zu SiteCudaMallocAsync\n", p, bytes);
  return p;
}

extern "C" __attribute__((noinline)) void SiteCudaFreeAsync(void* p, size_t bytes,
                                                           cudaStream_t s) {
  CHECK(cudaFreeAsync(p, s));
  std::printf("EXPECT segment_free cudaFreeAsync %p %zu SiteCudaFreeAsync\n", p, bytes);
}

extern "C" __attribute__((noinline)) void* SiteCudaHostAlloc(size_t bytes) {
  void* p = nullptr;
  CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  std::printf("EXPECT segment_alloc cudaHostAlloc %p %zu SiteCudaHostAlloc\n", p, bytes);
  return p;
}

extern "C" __attribute__((noinline)) void SiteCublas() {
  // cuBLAS allocates its workspace itself: the trace must show an allocation whose stack
  // goes through libcublas and this function. Its size is cuBLAS's business.
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) std::exit(3);
  const int n = 256;
  float *a, *b, *c;
  CHECK(cudaMalloc(&a, n * n * sizeof(float)));
  CHECK(cudaMalloc(&b, n * n * sizeof(float)));
  CHECK(cudaMalloc(&c, n * n * sizeof(float)));
  const float one = 1.0f, zero = 0.0f;
  if (cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, &zero, c, n) !=
      CUBLAS_STATUS_SUCCESS) {
    std::exit(4);
  }
  CHECK(cudaDeviceSynchronize());
  std::printf("EXPECT_STACK SiteCublas\n");
  cublasDestroy(handle);
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  CHECK(cudaFree(c));
}

int main() {
  CHECK(cudaSetDevice(0));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  void* d = SiteCudaMalloc(3 << 20);
  void* a = SiteCudaMallocAsync(5 << 20, stream);
  void* h = SiteCudaHostAlloc(1 << 20);
  SiteCudaFreeAsync(a, 5 << 20, stream);
  CHECK(cudaStreamSynchronize(stream));
  SiteCudaFree(d, 3 << 20);
  CHECK(cudaFreeHost(h));
  std::printf("EXPECT segment_free cudaFreeHost %p %d main\n", h, 1 << 20);
  SiteCublas();
  CHECK(cudaStreamDestroy(stream));
  std::fflush(stdout);
  return 0;
}
