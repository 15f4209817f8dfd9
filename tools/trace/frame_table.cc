#include "tools/trace/frame_table.h"

namespace gpumem::trace {

FrameTable::FrameTable(Trace* trace) : trace_(trace) {
  if (trace_->stacks.empty()) trace_->stacks.emplace_back();
  for (std::uint32_t i = 0; i < trace_->frames.size(); ++i) {
    const Frame& f = trace_->frames[i];
    frame_ids_.emplace(FrameKey{f.filename, f.line, f.function}, i);
  }
  for (std::uint32_t i = 0; i < trace_->stacks.size(); ++i) stack_ids_.emplace(trace_->stacks[i], i);
}

std::uint32_t FrameTable::Intern(const Frame& frame) {
  auto [it, inserted] = frame_ids_.try_emplace(FrameKey{frame.filename, frame.line, frame.function},
                                               static_cast<std::uint32_t>(trace_->frames.size()));
  if (inserted) trace_->frames.push_back(frame);
  return it->second;
}

std::uint32_t FrameTable::InternStack(const std::vector<std::uint32_t>& frame_ids) {
  auto [it, inserted] =
      stack_ids_.try_emplace(frame_ids, static_cast<std::uint32_t>(trace_->stacks.size()));
  if (inserted) trace_->stacks.push_back(frame_ids);
  return it->second;
}

}  // namespace gpumem::trace
