#include "bench/gpumem_trace_out.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "profiler/trace_writer.h"

namespace gpumem::bench {

namespace {

format::RecordType RecordTypeOf(trace::Action a) {
  switch (a) {
    case trace::Action::kAlloc: return format::RecordType::kAlloc;
    case trace::Action::kFreeRequested: return format::RecordType::kFree;
    case trace::Action::kSegmentAlloc: return format::RecordType::kSegmentAlloc;
    case trace::Action::kSegmentFree: return format::RecordType::kSegmentFree;
    case trace::Action::kSegmentMap: return format::RecordType::kMap;
    case trace::Action::kSegmentUnmap: return format::RecordType::kUnmap;
    case trace::Action::kOom: return format::RecordType::kOom;
    default: return format::RecordType::kStep;
  }
}

}  // namespace

// Records `t` through TraceWriter as the profiler would: frames and stacks interned in
// its StackTable, one record per event. gpumem traces have no "free completed" (the
// allocator frees at once), so those are left out. Returns the records written.
std::uint64_t WriteGpumemTrace(const trace::Trace& t, const std::string& path,
                               const std::map<std::string, std::string>& header) {
  TraceWriterOptions options;
  options.path = path;
  options.header = header;
  if (t.device_capacity) options.header["device_capacity"] = std::to_string(*t.device_capacity);
  absl::StatusOr<std::unique_ptr<TraceWriter>> writer = TraceWriter::Open(options);
  if (!writer.ok()) {
    std::fprintf(stderr, "%s\n", std::string(writer.status().message()).c_str());
    return 0;
  }
  StackTable& table = (*writer)->stacks();
  std::vector<std::uint32_t> stack_ids(t.stacks.size(), 0);
  for (std::size_t s = 1; s < t.stacks.size(); ++s) {
    std::vector<RawFrame> raw;
    for (std::uint32_t f : t.stacks[s]) {
      const trace::Frame& frame = t.frames[f];
      const std::uint32_t id = table.InternNamedFrame(format::FrameKind::kPython, frame.function,
                                                      frame.filename, frame.line);
      raw.push_back(RawFrame{id, 0, RawFrame::kNamedTag});
    }
    stack_ids[s] = table.Intern(raw.data(), raw.size());
  }
  const std::int64_t origin = TraceWriter::NowNs();
  std::uint64_t step = 0;
  for (const trace::Event& e : t.events) {
    if (e.action == trace::Action::kFreeCompleted) continue;
    RawRecord r;
    r.type = RecordTypeOf(e.action);
    r.time_ns = origin + e.time_us * 1000;
    r.addr = e.addr;
    r.size = e.action == trace::Action::kStep ? ++step : e.size;
    r.stream = e.stream;
    r.stack_id = stack_ids[e.stack_id];
    r.thread = 1;
    r.device = e.device;
    if (e.action == trace::Action::kOom) {
      r.extra = e.device_free;
      r.has_extra = true;
    }
    (*writer)->Record(r);
  }
  const std::uint64_t written = (*writer)->recorded();
  absl::Status closed = (*writer)->Close();
  if (!closed.ok()) {
    std::fprintf(stderr, "%s\n", std::string(closed.message()).c_str());
    return 0;
  }
  return written;
}

trace::Trace WithLeak(trace::Trace t, std::uint64_t bytes_per_step, std::size_t steps) {
  const std::uint32_t frame = static_cast<std::uint32_t>(t.frames.size());
  t.frames.push_back({"train.py", 88, "keep_logits"});
  const std::uint32_t stack = static_cast<std::uint32_t>(t.stacks.size());
  t.stacks.push_back({frame});
  std::vector<trace::Event> events;
  events.reserve(t.events.size() + steps);
  const std::size_t every = std::max<std::size_t>(1, t.events.size() / steps);
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    events.push_back(t.events[i]);
    if ((i + 1) % every != 0) continue;
    trace::Event leak = t.events[i];
    leak.action = trace::Action::kAlloc;
    leak.stack_id = stack;
    leak.addr = (std::uint64_t{0x7e} << 40) + (i / every) * bytes_per_step;
    leak.size = bytes_per_step;
    events.push_back(leak);
  }
  t.events = std::move(events);
  return t;
}

}  // namespace gpumem::bench
