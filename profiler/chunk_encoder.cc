#include "profiler/chunk_encoder.h"

namespace gpumem {

using format::PutString;
using format::PutVarint;
using format::ZigZag;

void ChunkEncoder::AddFrame(const FrameDef& frame) {
  payload_.push_back(static_cast<char>(format::RecordType::kFrame));
  PutVarint(&payload_, frame.id);
  payload_.push_back(static_cast<char>(frame.kind));
  PutVarint(&payload_, ZigZag(frame.line));
  PutString(&payload_, frame.function);
  PutString(&payload_, frame.filename);
}

void ChunkEncoder::AddStack(const StackDef& stack) {
  payload_.push_back(static_cast<char>(format::RecordType::kStack));
  PutVarint(&payload_, stack.id);
  PutVarint(&payload_, stack.frames.size());
  for (std::uint32_t f : stack.frames) PutVarint(&payload_, f);
}

void ChunkEncoder::AddAnnotation(std::int64_t time_ns, std::int32_t device, bool start,
                                 const std::string& name) {
  std::uint8_t first = static_cast<std::uint8_t>(format::RecordType::kAnnotation);
  if (start) first |= format::kFlagAnnotationStart;
  payload_.push_back(static_cast<char>(first));
  PutVarint(&payload_, ZigZag(time_ns));
  PutVarint(&payload_, ZigZag(device));
  PutString(&payload_, name);
}

void ChunkEncoder::AddEvent(const RawRecord& r) {
  if (r.has_autograd) {  // applies to the event record right after it
    payload_.push_back(static_cast<char>(format::RecordType::kAutograd));
    PutVarint(&payload_, r.autograd_seq);
    PutVarint(&payload_, r.autograd_thread);
    PutVarint(&payload_, r.autograd_node_frame);
  }
  std::uint8_t first = static_cast<std::uint8_t>(r.type);
  const bool same_thread = events_ > 0 && r.thread == prev_.thread;
  const bool same_ds = events_ > 0 && r.device == prev_.device && r.stream == prev_.stream;
  const bool same_stack = events_ > 0 && r.stack_id == prev_.stack_id;
  if (same_thread) first |= format::kFlagSameThread;
  if (same_ds) first |= format::kFlagSameDeviceStream;
  if (same_stack) first |= format::kFlagSameStack;
  if (r.has_extra) first |= format::kFlagExtra;
  payload_.push_back(static_cast<char>(first));
  PutVarint(&payload_, ZigZag(r.time_ns - prev_.time_ns));
  if (!same_thread) PutVarint(&payload_, r.thread);
  if (!same_ds) {
    PutVarint(&payload_, ZigZag(r.device));
    PutVarint(&payload_, r.stream);
  }
  PutVarint(&payload_, ZigZag(static_cast<std::int64_t>(r.addr - prev_.addr)));
  PutVarint(&payload_, r.size);
  if (!same_stack) PutVarint(&payload_, r.stack_id);
  if (r.has_extra) PutVarint(&payload_, r.extra);
  prev_ = r;
  ++events_;
}

void ChunkEncoder::AddJournalMark(std::uint32_t region, std::uint64_t next_index) {
  payload_.push_back(static_cast<char>(format::RecordType::kJournalMark));
  PutVarint(&payload_, region);
  PutVarint(&payload_, next_index);
}

void ChunkEncoder::Reset() {
  payload_.clear();
  events_ = 0;
  prev_ = RawRecord{};
}

}  // namespace gpumem
