// Builds the payload of one records chunk: frame and stack definitions first, then
// annotations, then events delta-encoded against the previous event of the same chunk
// (docs/trace-format.md). Deltas restart with every chunk so each chunk decodes alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/raw_record.h"
#include "profiler/trace_format.h"

namespace gpumem {

struct FrameDef {
  std::uint32_t id = 0;
  format::FrameKind kind = format::FrameKind::kNative;
  std::int32_t line = 0;
  std::string function;
  std::string filename;
};

struct StackDef {
  std::uint32_t id = 0;
  std::vector<std::uint32_t> frames;  // innermost first
};

class ChunkEncoder {
 public:
  void AddFrame(const FrameDef& frame);
  void AddStack(const StackDef& stack);
  void AddAnnotation(std::int64_t time_ns, std::int32_t device, bool start,
                     const std::string& name);
  void AddEvent(const RawRecord& record);
  // Journal region `region`: its records before `next_index` are in this chunk or an
  // earlier one (the reader ignores them in the raw journal).
  void AddJournalMark(std::uint32_t region, std::uint64_t next_index);

  const std::string& payload() const { return payload_; }
  std::size_t events() const { return events_; }
  void Reset();

 private:
  std::string payload_;
  std::size_t events_ = 0;
  RawRecord prev_;  // zero at the start of every chunk
};

}  // namespace gpumem
