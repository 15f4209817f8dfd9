// torch.cuda.memory._record_memory_history / _snapshot under gpumem: segments are
// gpumem's mapped extents and slabs with their blocks, traces the ring kept by History.
// PyTorch's serializer turns the result into the pickle that memory_viz and
// `gpumem report` read.
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <limits>
#include <vector>

#include "hooks/gpumem.h"
#include "hooks/torch/gpumem_allocator.h"
#include "hooks/torch/layout.h"

namespace gpumem::torch {
namespace {

cca::AllocatorConfigInfo GpumemConfigInfo() {
  cca::AllocatorConfigInfo c{};
  c.garbage_collection_threshold = 0.0;
  c.max_split_size = std::numeric_limits<size_t>::max();
  c.pinned_num_register_threads = 1;
  c.expandable_segments = false;
  c.release_lock_on_malloc = false;
  c.pinned_use_host_register = false;
  c.graph_capture_record_stream_reuse = false;
  c.last_allocator_settings = "gpumem";
  return c;
}

}  // namespace

bool GpumemAllocator::isHistoryEnabled() { return history_.enabled(); }

void GpumemAllocator::recordHistory(bool enabled, cca::CreateContextFn context_recorder,
                                    size_t alloc_trace_max_entries, cca::RecordContext when,
                                    bool clear_history,
                                    const std::vector<std::string>& skip_actions) {
  history_.Configure(enabled, context_recorder, alloc_trace_max_entries, when, clear_history,
                     skip_actions);
}

cca::SnapshotInfo GpumemAllocator::snapshot(c10::MempoolId_t mempool, bool include_traces) {
  cca::SnapshotInfo info;
  const int devices = c10::cuda::device_count();
  const bool all_pools = mempool.first == 0 && mempool.second == 0;
  const std::uint64_t only = all_pools ? 0 : pools_.Key(mempool);
  for (int d = 0; d < devices; ++d) {
    const bool expandable = std::strcmp(gpumem_backend_name(d), "vmm") == 0;
    const Layout l = ReadLayout(d);
    std::size_t next_block = 0;
    for (const gpumem_segment_t& seg : l.segments) {
      const std::size_t first = next_block;
      next_block += seg.block_count;
      if (!all_pools && seg.pool != only) continue;
      cdca::SegmentInfo s;
      s.device = static_cast<c10::DeviceIndex>(d);
      s.address = seg.address;
      s.total_size = seg.total_size;
      s.requested_size = seg.requested_size;
      s.allocated_size = seg.allocated_size;
      s.stream = reinterpret_cast<void*>(seg.stream);
      s.is_large = seg.is_small == 0;
      s.is_expandable = expandable;
      s.owner_private_pool_id = pools_.IdOf(seg.pool);
      for (std::size_t i = first; i < next_block && i < l.blocks.size(); ++i) {
        const gpumem_block_t& b = l.blocks[i];
        cdca::BlockInfo block;
        block.size = b.size;
        block.requested_size = b.requested_size;
        block.allocated = b.state == 1;
        block.active = b.state != 0;
        if (block.active) {
          s.active_size += b.size;
          block.context_when_allocated =
              history_.ContextOf(reinterpret_cast<void*>(b.address));
        }
        s.blocks.push_back(std::move(block));
      }
      info.segments.push_back(std::move(s));
    }
  }
  info.device_traces = include_traces
                           ? history_.Traces(devices)
                           : std::vector<std::vector<cdca::TraceEntry>>(devices);
  info.config_metadata = GpumemConfigInfo();
  return info;
}

void GpumemAllocator::attachOutOfMemoryObserver(cca::OutOfMemoryObserver observer) {
  std::lock_guard<std::mutex> lock(observers_mu_);
  oom_observers_.push_back(std::move(observer));
}

void GpumemAllocator::attachAllocatorTraceTracker(cca::AllocatorTraceTracker) {
  // PyTorch attaches these for NCCL buffer registration (opt-in): gpumem's pages move
  // under defragmentation, so it offers no segment events to register. Accepted, not
  // called: registration stays off, as with the caching allocator's default.
}

}  // namespace gpumem::torch
