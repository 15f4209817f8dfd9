#include "profiler/library_holdings.h"

namespace gpumem {

void LibraryHoldings::OnAlloc(std::uint64_t key, std::int32_t device, Library library,
                              std::uint64_t bytes, const std::string& site) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [id, added] = site_ids_.try_emplace(site, static_cast<std::uint32_t>(sites_.size()));
  if (added) sites_.push_back(site);
  OnFreeLocked(key);  // an address the driver handed out again: its old block is gone
  blocks_[key] = Block{device, library, bytes, id->second};
  by_site_[{device, library, id->second}] += bytes;
  by_library_[{device, library}] += bytes;
  if (device >= 0 && device < kMaxDevices) devices_ |= std::uint64_t{1} << device;
}

void LibraryHoldings::OnFree(std::uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  OnFreeLocked(key);
}

void LibraryHoldings::OnFreeLocked(std::uint64_t key) {
  const auto it = blocks_.find(key);
  if (it == blocks_.end()) return;
  const Block& b = it->second;
  by_site_[{b.device, b.library, b.site}] -= b.bytes;
  by_library_[{b.device, b.library}] -= b.bytes;
  blocks_.erase(it);
}

std::uint64_t LibraryHoldings::Bytes(std::int32_t device, Library library) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_library_.find({device, library});
  return it == by_library_.end() ? 0 : it->second;
}

std::string LibraryHoldings::TopSite(std::int32_t device, Library library) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::uint64_t most = 0;
  std::uint32_t top = 0;
  for (const auto& [where, bytes] : by_site_) {
    const auto& [d, l, site] = where;
    if (d != device || l != library || sites_[site].empty()) continue;
    // Ties go to the site seen first, whatever the map's order.
    if (bytes > most || (bytes == most && site < top)) {
      most = bytes;
      top = site;
    }
  }
  return most == 0 ? std::string() : sites_[top];
}

std::uint64_t LibraryHoldings::Devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  return devices_;
}

}  // namespace gpumem
