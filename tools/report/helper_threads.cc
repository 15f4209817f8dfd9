#include "tools/report/helper_threads.h"

#include <algorithm>
#include <vector>

#include "profiler/package_notes.h"
#include "tools/trace/autograd_links.h"

namespace gpumem::report {

HelperThreads::HelperThreads(const trace::Trace& trace, const SiteTable& sites)
    : sites_(sites) {
  if (!trace.run.pid) return;
  main_thread_ = static_cast<std::uint32_t>(*trace.run.pid);
  for (const trace::Annotation& a : trace.annotations) {
    if (const std::optional<std::uint32_t> t = format::ParseLoopThreadNote(a.name)) {
      auto [it, first] = loop_since_us_.try_emplace(*t, a.time_us);
      if (!first) it->second = std::min(it->second, a.time_us);
    }
  }
  const std::vector<bool> backward = trace::BackwardStacks(trace);
  for (const trace::Event& e : trace.events) {
    if (e.action == trace::Action::kAlloc && e.stack_id < backward.size() &&
        backward[e.stack_id]) {
      backward_threads_.insert(e.thread);
    }
  }
}

void HelperThreads::OnAlloc(const trace::Event& e) {
  if (!main_thread_) return;
  Forget(e.addr);  // an allocation at a live address: the old block is gone
  const std::uint64_t size = DeviceBytes(e.size);
  const bool loop = OnLoopThread(e);
  if (loop || backward_threads_.contains(e.thread)) {
    main_allocs_ += loop;
    loop_bytes_[e.device] += size;
    return;
  }
  const std::uint32_t site = sites_.site_of_stack(e.stack_id);
  auto [it, first] = by_site_.try_emplace(Key(e.device, site));
  SiteState& s = it->second;
  s.loop_bytes_at_last = loop_bytes_[e.device];
  if (first) {
    s.first_main = main_allocs_;
    s.first_size = size;
  }
  s.kept.bytes += size;
  ++s.kept.blocks;
  s.kept.first_size_blocks += size == s.first_size;
  s.kept.main_allocs = main_allocs_ - s.first_main;
  held_[e.addr] = Held{e.device, site, size};
}

bool HelperThreads::OnLoopThread(const trace::Event& e) const {
  if (e.thread == *main_thread_) return true;
  const auto it = loop_since_us_.find(e.thread);
  return it != loop_since_us_.end() && e.time_us >= it->second;
}

void HelperThreads::OnFree(const trace::Event& e) {
  if (main_thread_) Forget(e.addr);
}

void HelperThreads::Forget(std::uint64_t addr) {
  auto it = held_.find(addr);
  if (it == held_.end()) return;
  SiteState& s = by_site_[Key(it->second.device, it->second.site)];
  s.kept.bytes -= it->second.size;
  --s.kept.blocks;
  s.kept.first_size_blocks -= it->second.size == s.first_size;
  held_.erase(it);
}

std::optional<HelperSite> HelperThreads::Kept(std::int32_t device) const {
  std::optional<HelperSite> best;
  const auto loop_bytes = loop_bytes_.find(device);
  for (const auto& [key, s] : by_site_) {
    if (static_cast<std::int32_t>(key >> 32) != device) continue;
    HelperKept kept = s.kept;
    kept.loop_bytes_since_last =
        (loop_bytes == loop_bytes_.end() ? 0 : loop_bytes->second) - s.loop_bytes_at_last;
    if (!KeptByHelper(kept)) continue;
    if (!best || kept.bytes > best->kept.bytes) {
      best = HelperSite{static_cast<std::uint32_t>(key), kept};
    }
  }
  return best;
}

}  // namespace gpumem::report
