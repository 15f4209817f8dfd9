// Builds synthetic traces event by event, with stacks that look like a PyTorch training
// script's: a library frame innermost, then the user's lines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/report/synthetic.h"
#include "tools/trace/frame_table.h"
#include "tools/trace/trace.h"

namespace gpumem::report::synthetic {

class Builder {
  using Action = trace::Action;

 public:
  Builder() : frames_(&trace_) {
    trace_.source = "synthetic";
    trace_.format = "synthetic";
    trace_.device_capacity = kCapacity;
  }

  // A stack: torch's linear forward innermost, then train.py:`line` in `function`,
  // then the script's entry.
  std::uint32_t Stack(int line, const std::string& function) {
    return Stack({{"train.py", line, function}});
  }
  // The same around the given user frames (innermost first).
  std::uint32_t Stack(const std::vector<trace::Frame>& user) {
    std::vector<std::uint32_t> ids = {
        frames_.Intern({"site-packages/torch/nn/modules/linear.py", 125, "forward"})};
    for (const trace::Frame& f : user) ids.push_back(frames_.Intern(f));
    ids.push_back(frames_.Intern({"train.py", 200, "<module>"}));
    return frames_.InternStack(ids);
  }

  // A stack of exactly these frames (innermost first): a CUPTI record's API frame and
  // the native frames of the library that called it.
  std::uint32_t RawStack(const std::vector<trace::Frame>& frames) {
    std::vector<std::uint32_t> ids;
    for (const trace::Frame& f : frames) ids.push_back(frames_.Intern(f));
    return frames_.InternStack(ids);
  }
  // An event on another device (-1: pinned host memory).
  void AddOn(std::int32_t device, Action action, std::uint64_t addr, std::uint64_t size,
             std::uint32_t stack = 0) {
    Add(action, addr, size, stack);
    trace_.events.back().device = device;
  }
  // A step end with the driver's figures (docs/trace-format.md).
  void StepWithDriver(std::uint64_t free, std::uint64_t total, std::int32_t device = 0) {
    std::uint64_t number = 1;  // the step's number, as the recorder writes it
    for (const trace::Event& e : trace_.events) number += e.action == Action::kStep;
    Step();
    trace_.events.back().size = number;
    trace_.events.back().addr = free;
    trace_.events.back().stream = total;
    trace_.events.back().device = device;
  }
  // The recording process's pid (its main thread's id), as a gpumem trace's header says.
  void Pid(std::uint32_t pid) {
    trace_.run.pid = pid;
    thread_ = pid;
  }
  // The thread of the events added from now on.
  void OnThread(std::uint32_t thread) { thread_ = thread; }
  // The device of the events added from now on.
  void OnDevice(std::int32_t device) { device_ = device; }
  void Add(Action action, std::uint64_t addr, std::uint64_t size, std::uint32_t stack = 0) {
    trace::Event e;
    e.thread = thread_;
    e.device = device_;
    e.action = action;
    e.addr = addr;
    e.size = size;
    e.stack_id = stack;
    e.time_us = time_us_ += 10;
    trace_.events.push_back(e);
  }
  void Segment(std::uint64_t addr, std::uint64_t size) { Add(Action::kSegmentAlloc, addr, size); }
  void Alloc(std::uint64_t addr, std::uint64_t size, std::uint32_t stack) { Add(Action::kAlloc, addr, size, stack); }
  void Free(std::uint64_t addr, std::uint64_t size, std::uint32_t stack) {
    Add(Action::kFreeRequested, addr, size, stack);
    Add(Action::kFreeCompleted, addr, size, stack);
  }
  void Step(trace::StepSource source = trace::StepSource::kUnknown) {
    Add(Action::kStep, 0, 0);
    trace_.events.back().step_source = source;
  }
  // A note (annotation) between the last event and the next.
  void Note(const std::string& text, std::int32_t device = 0) {
    trace_.annotations.push_back({text, true, time_us_ += 5, device});
  }
  void Capacity(std::uint64_t bytes, trace::CapacitySource source, std::int32_t device = 0) {
    trace_.capacity_changes.push_back({time_us_ += 10, device, bytes, source});
  }
  void NoHeaderCapacity() { trace_.device_capacity.reset(); }
  void Oom(std::uint64_t request, std::uint64_t device_free) {
    Add(Action::kOom, device_free, request);
    trace_.events.back().device_free = device_free;
  }
  // A failed device-memory call of another library (cuBLAS asking the driver).
  void FailedAlloc(const std::string& call, std::uint64_t size, std::uint32_t error,
                   std::uint64_t device_free, std::uint32_t stack) {
    trace::FailedAllocation f;
    f.time_us = time_us_ += 10;
    f.size = size;
    f.call = call;
    f.error = error;
    f.device_free = device_free;
    f.stack_id = stack;
    trace_.failed_allocations.push_back(f);
  }
  trace::Trace Take() { return std::move(trace_); }
  std::size_t size() const { return trace_.events.size(); }
  void Reserve(std::size_t n) { trace_.events.reserve(n); }

 private:
  trace::Trace trace_;
  trace::FrameTable frames_;
  std::int64_t time_us_ = 1'000'000;
  std::uint32_t thread_ = 0;
  std::int32_t device_ = 0;
};

}  // namespace gpumem::report::synthetic
