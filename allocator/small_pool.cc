#include "allocator/small_pool.h"

namespace gpumem {

SmallPool::~SmallPool() {
  for (Slab* s : slabs_) delete s;
  for (Slab* s : spare_) delete s;
}

Slab* SmallPool::AddSlab(int c, Block* block) {
  Slab* s;
  if (spare_.empty()) {
    s = new Slab;
  } else {
    s = spare_.back();
    spare_.pop_back();
  }
  s->block = block;
  s->size_class = c;
  s->slot_bytes = SizeClasses::ClassSize(c);
  s->count = static_cast<std::uint32_t>(SizeClasses::SlabCount(c));
  s->used = 0;
  s->fresh = 0;  // slots are handed out in address order, without a list to fill
  s->free_slots.resize(s->count);
  s->free_count = 0;
  slabs_.push_back(s);
  empty_bytes_ += block->size;
  bytes_ += block->size;
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
