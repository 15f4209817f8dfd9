#include "hooks/torch/install.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "hooks/gpumem.h"
#include "hooks/torch/c_error.h"
#include "hooks/torch/autograd_link.h"
#include "hooks/torch/torch_unwinder.h"
#include "hooks/torch/profile.h"

namespace gpumem::torch {
namespace {

namespace pluggable = ::torch::cuda::CUDAPluggableAllocator;

std::atomic<bool> g_installed{false};

std::string LastError() {
  std::string s(gpumem_last_error(nullptr, 0), '\0');
  gpumem_last_error(s.data(), s.size());
  s.resize(s.size() - 1);
  return s;
}

void* Alloc(std::size_t size, int device, cudaStream_t stream) {
  if (gpumem_tracing() != 0) LinkNextAllocationToAutograd();
  void* p = gpumem_alloc(static_cast<ssize_t>(size), device, stream);
  // PyTorch's pluggable allocator does not check for NULL; raising here is what makes
  // `except torch.OutOfMemoryError` work as with the native allocator.
  TORCH_CHECK_WITH(OutOfMemoryError, p != nullptr || size == 0,
                   "CUDA out of memory (gpumem). ", LastError());
  return p;
}

void Free(void* ptr, std::size_t size, int device, cudaStream_t stream) {
  gpumem_free(ptr, static_cast<ssize_t>(size), device, stream);
}

void Unsupported(const char* what) {
  TORCH_CHECK(false, "gpumem does not support ", what,
              " yet (CUDA graph capture and torch.cuda.MemPool need private pools). "
              "Run this program without gpumem (unset GPUMEM / drop `gpumem run`).");
}

}  // namespace

void install() {
  if (g_installed.load()) return;
  std::string config_error(gpumem_config_error(nullptr, 0), '\0');
  if (gpumem_config_error(config_error.data(), config_error.size()) != 0) {
    config_error.resize(config_error.size() - 1);
    TORCH_CHECK(false, config_error);
  }
  const char* mode = std::getenv("GPUMEM_MODE");
  TORCH_CHECK(mode == nullptr || std::string(mode) != "profile",
              "GPUMEM_MODE=profile keeps PyTorch's own allocator: call "
              "gpumem::torch::profile() once CUDA is initialized instead of install()");
  auto* current = c10::cuda::CUDACachingAllocator::allocator.load();
  TORCH_CHECK(current == nullptr || !current->initialized(),
              "gpumem must be installed before PyTorch's CUDA allocator is first used, "
              "and it was used already (", current ? current->name() : std::string("?"),
              " allocator initialized). Fix: install gpumem at the very start of the "
              "program (call gpumem.install() right after `import torch`, before any "
              "tensor goes to the GPU), or start it with `gpumem run -- python ...` / "
              "GPUMEM=1, which install it before the script runs.");
  UsePytorchUnwinder();
  std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> base =
      pluggable::createCustomAllocator(&Alloc, &Free);
  auto allocator = std::dynamic_pointer_cast<pluggable::CUDAPluggableAllocator>(base);
  TORCH_CHECK(allocator != nullptr, "createCustomAllocator returned an unexpected type");
  allocator->set_init_fn([](int device_count) { gpumem_init(device_count); });
  allocator->set_reset_fn([] { gpumem_empty_cache(-1); });
  allocator->set_memory_fraction_fn([](double fraction, int device) {
    TORCH_CHECK(gpumem_set_memory_fraction(fraction, device) == 0, LastError());
  });
  allocator->set_record_stream_fn(
      [](void* ptr, cudaStream_t stream) { gpumem_record_stream(ptr, -1, stream); });
  allocator->set_begin_allocate_to_pool(
      [](int, c10::cuda::MempoolId_t, std::function<bool(cudaStream_t)>) {
        Unsupported("allocating to a private pool");
      });
  allocator->set_end_allocate_to_pool_fn(
      [](int, c10::cuda::MempoolId_t) { Unsupported("allocating to a private pool"); });
  allocator->set_release_pool(
      [](int, c10::cuda::MempoolId_t) { Unsupported("releasing a private pool"); });
  pluggable::changeCurrentAllocator(allocator);
  g_installed.store(true);
}

bool installed() { return g_installed.load(); }

}  // namespace gpumem::torch

extern "C" int gpumem_torch_install(char* err, std::size_t len) {
  return gpumem::torch::CatchToCError([] { gpumem::torch::install(); }, err, len);
}

extern "C" int gpumem_torch_installed(void) { return gpumem::torch::installed() ? 1 : 0; }
