#include "tools/replay/effective_frees.h"

#include "absl/container/flat_hash_map.h"

namespace gpumem::replay {

std::vector<bool> EffectiveFrees(const std::vector<trace::Event>& events) {
  std::vector<bool> frees(events.size(), false);
  absl::flat_hash_map<std::uint64_t, std::size_t> pending;  // addr -> free_requested index
  for (std::size_t i = 0; i < events.size(); ++i) {
    const trace::Event& e = events[i];
    switch (e.action) {
      case trace::Action::kFreeRequested:
        pending[e.addr] = i;
        break;
      case trace::Action::kFreeCompleted:
        pending.erase(e.addr);
        frees[i] = true;
        break;
      case trace::Action::kAlloc:
        // The address is handed out again: a request never completed was the free.
        if (auto it = pending.find(e.addr); it != pending.end()) {
          frees[it->second] = true;
          pending.erase(it);
        }
        break;
      default:
        break;
    }
  }
  for (const auto& [addr, index] : pending) frees[index] = true;
  return frees;
}

}  // namespace gpumem::replay
