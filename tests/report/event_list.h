// Appends events to a synthetic trace, each 1 us after the last: how the report tests
// write what a recorded run would hold.
#pragma once

#include <cstdint>

#include "tools/trace/trace.h"

namespace gpumem::report::test_trace {

class Events {
 public:
  explicit Events(trace::Trace* t) : t_(t) {}
  void Push(trace::Action a, std::uint64_t at, std::uint64_t size, std::uint32_t stack) {
    trace::Event e;
    e.action = a;
    e.addr = at;
    e.size = size;
    e.stack_id = stack;
    e.time_us = ++time_;
    t_->events.push_back(e);
  }
  void Free(std::uint64_t at, std::uint64_t size, std::uint32_t stack) {
    Push(trace::Action::kFreeRequested, at, size, stack);
    Push(trace::Action::kFreeCompleted, at, size, stack);
  }
  void Step() { Push(trace::Action::kStep, 0, 0, 0); }

 private:
  trace::Trace* t_;
  std::int64_t time_ = 0;
};

}  // namespace gpumem::report::test_trace
