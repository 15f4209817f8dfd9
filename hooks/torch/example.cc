// A libtorch program that uses gpumem: install() first, then ordinary PyTorch. The GPU
// test builds and runs it; it checks its own results and exits non-zero if any is wrong.
#include <torch/torch.h>

#include <cstdio>

#include "hooks/gpumem.h"
#include "hooks/torch/install.h"

int main() {
  if (!torch::cuda::is_available()) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  gpumem::torch::install();
  torch::manual_seed(0);
  auto model = torch::nn::Linear(256, 64);
  model->to(torch::kCUDA);
  torch::optim::SGD opt(model->parameters(), 0.1);
  float first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    auto x = torch::randn({128, 256}, torch::kCUDA);
    auto loss = model->forward(x).pow(2).mean();
    opt.zero_grad();
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<float>();
    gpumem_step();
  }
  gpumem_stats_t st;
  if (gpumem_stats(0, &st) != 0 || st.alloc_count == 0 || st.peak_allocated_bytes == 0) {
    std::printf("FAIL: gpumem served no allocation\n");
    return 1;
  }
  // Out of memory must surface as PyTorch's OutOfMemoryError.
  bool oom = false;
  try {
    auto huge = torch::empty({int64_t{1} << 50}, torch::kCUDA);
  } catch (const c10::OutOfMemoryError&) {
    oom = true;
  }
  std::printf("loss %.5f -> %.5f, %llu allocations, oom raised: %d\n", first, last,
              static_cast<unsigned long long>(st.alloc_count), oom);
  if (!oom || !(last < first)) {
    std::printf("FAIL\n");
    return 1;
  }
  std::printf("PASS\n");
  return 0;
}
