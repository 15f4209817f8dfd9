#include "allocator/small_pool.h"

namespace gpumem {

SmallPool::~SmallPool() {
  for (Slab* s : slabs_) delete s;
}

Slab* SmallPool::AddSlab(int c, Block* block) {
  Slab* s = new Slab;
  s->block = block;
  s->size_class = c;
  s->slot_bytes = SizeClasses::ClassSize(c);
  const std::size_t count = SizeClasses::SlabCount(c);
  s->free_slots.reserve(count);
  // Lowest addresses handed out first.
  for (std::size_t i = count; i-- > 0;) s->free_slots.push_back(static_cast<std::uint32_t>(i));
  slabs_.push_back(s);
  List(s);
  return s;
}

void SmallPool::List(Slab* s) {
  Slab*& head = avail_[s->size_class];
  s->prev = nullptr;
  s->next = head;
  if (head != nullptr) head->prev = s;
  head = s;
  s->listed = true;
}

void SmallPool::Unlist(Slab* s) {
  Slab*& head = avail_[s->size_class];
  if (s->prev != nullptr) s->prev->next = s->next;
  else head = s->next;
  if (s->next != nullptr) s->next->prev = s->prev;
  s->prev = s->next = nullptr;
  s->listed = false;
}

}  // namespace gpumem
