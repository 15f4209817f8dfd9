#include "allocator/thread_cache.h"

#include <algorithm>
#include <vector>

namespace gpumem {
namespace {

// Every cache this thread has, kept alive here; at thread exit each goes back to its owner.
class Caches {
 public:
  ~Caches();
  void Add(std::uint64_t id, std::shared_ptr<ThreadCache> cache) {
    // Caches of destroyed allocators are dead weight: drop them (their owner is null).
    std::lock_guard reg(RegistryMutex());
    std::erase_if(entries_, [](const Entry& e) { return e.cache->owner() == nullptr; });
    entries_.push_back({id, std::move(cache)});
  }
  ThreadCache* Find(std::uint64_t id) const {
    for (const Entry& e : entries_) {
      if (e.id == id) return e.cache.get();
    }
    return nullptr;
  }

 private:
  struct Entry {
    std::uint64_t id;
    std::shared_ptr<ThreadCache> cache;
  };
  std::vector<Entry> entries_;
};

thread_local Caches caches;

}  // namespace

thread_local ThreadCaches::Fast ThreadCaches::fast_;

Caches::~Caches() {
  ThreadCaches::MarkExiting();
  std::lock_guard reg(RegistryMutex());
  for (Entry& e : entries_) {
    if (ThreadCacheOwner* owner = e.cache->owner()) owner->DetachThreadCache(e.cache.get());
  }
  entries_.clear();
}

ThreadCache* ThreadCaches::FindSlow(std::uint64_t id) {
  if (fast_.exiting) return nullptr;
  ThreadCache* c = caches.Find(id);
  if (c != nullptr) fast_ = {id, c, false};
  return c;
}

bool ThreadCaches::Add(std::uint64_t id, std::shared_ptr<ThreadCache> cache) {
  if (fast_.exiting) return false;
  ThreadCache* c = cache.get();
  caches.Add(id, std::move(cache));
  fast_ = {id, c, false};
  return true;
}

std::uint64_t ThreadCaches::NewOwnerId() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::mutex& RegistryMutex() {
  // Leaked: threads may exit, and allocators die, during static destruction.
  static auto* mu = new std::mutex;
  return *mu;
}

}  // namespace gpumem
