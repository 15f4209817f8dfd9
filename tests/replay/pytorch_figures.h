// PyTorch's own figures for the real traces in tests/data, measured by PyTorch itself
// (torch.cuda.max_memory_reserved / max_memory_allocated) while the traces were recorded
// on an NVIDIA H100 80GB, PyTorch 2.11.0+cu130: copied from tests/data/README.md, which
// has them from the shared trace set's README. Independent of gpumem's code.
#pragma once

#include <cstdint>

namespace gpumem::replay::testing {

struct PytorchFigures {
  const char* name;                       // tests/data/NAME.trace.tsv.gz
  std::uint64_t peak_allocated;
  std::uint64_t peak_reserved_default;     // the run the trace was recorded from
  std::uint64_t peak_reserved_expandable;  // the same workload with expandable_segments:True
};

inline constexpr PytorchFigures kPytorchFigures[] = {
    {"gpt2", 7'722'708'480, 8'082'423'808, 8'269'070'336},
    {"resnet50", 3'214'460'928, 3'638'558'720, 3'246'391'296},
    {"varlen_bert", 12'289'969'152, 17'527'996'416, 13'434'355'712},
    {"leaky_mlp", 517'020'160, 538'968'064, 532'676'608},
};

}  // namespace gpumem::replay::testing
