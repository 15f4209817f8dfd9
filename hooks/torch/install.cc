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
#include "hooks/torch/gpumem_allocator.h"
#include "hooks/torch/torch_unwinder.h"

namespace gpumem::torch {
namespace {

namespace pluggable = ::torch::cuda::CUDAPluggableAllocator;

std::atomic<bool> g_installed{false};

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
  auto allocator = std::make_shared<GpumemAllocator>();
  allocator->init(0);  // as createCustomAllocator does: PyTorch's lazy init may not call it
  pluggable::changeCurrentAllocator(allocator);
  g_installed.store(true);
}

bool installed() { return g_installed.load(); }

}  // namespace gpumem::torch

extern "C" int gpumem_torch_install(char* err, std::size_t len) {
  return gpumem::torch::CatchToCError([] { gpumem::torch::install(); }, err, len);
}

extern "C" int gpumem_torch_installed(void) { return gpumem::torch::installed() ? 1 : 0; }
