// The page a device gets when none is asked for (GPUMEM_PAGE_SIZE unset or "auto").
//
// Every mapping costs the driver the same whatever its size (~40 us a 2 MiB page mapped on
// an H100, tests/gpu/vmm_call_costs.py), and it is paid on the allocating thread, often
// the critical path. What coarser pages cost is memory: a partly used page where a range
// ends, and idle memory in free pieces smaller than a page that cannot be moved. That
// cost scales with the device, not the request: so the page is a fixed share of the
// device, at most 1/8192 of it (8 MiB on an 80 GB card, 4 MiB on 40-48 GB, the 2 MiB
// granule on 24 GB and less), never past 8 MiB. Measured on H100s (docs/allocator.md,
// "Driver call costs"): 8 MiB pages took FSDP2 at hidden 2048 from 1.09 of native's step
// time to 1.008 [1.002, 1.014] (899 blocks pooled), with peak reserved / allocated
// 1.015-1.018 on both ranks either way;
// DDP, gpt2 and resnet50 stayed at native's step time, their ratios within 0.003 of
// 2 MiB's.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace gpumem {

inline constexpr std::uint64_t kDefaultPagesPerDevice = 8192;
inline constexpr std::uint64_t kMaxDefaultPage = std::uint64_t{8} << 20;

// The default page for a device of `capacity` bytes whose mapping granularity is
// `granularity`: a power of two of the granularity, from 1 to 4 of them on 2 MiB granules.
// Without VMM (`vmm` false: plain cudaMalloc segments, rounded to the page) there is no
// mapping to save on: the granularity.
inline std::size_t DefaultPageBytes(std::uint64_t capacity, std::size_t granularity,
                                    bool vmm = true) {
  if (!vmm || granularity == 0 || !std::has_single_bit(granularity)) return granularity;
  const std::uint64_t share = std::bit_floor(capacity / kDefaultPagesPerDevice);
  const std::uint64_t most = std::max<std::uint64_t>(granularity, kMaxDefaultPage);
  return static_cast<std::size_t>(std::clamp<std::uint64_t>(share, granularity, most));
}

}  // namespace gpumem
