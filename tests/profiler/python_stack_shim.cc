// A tiny shared library that python_stacks_test.py loads with ctypes: it records one
// allocation with the recorder (stacks as asked) and reads the trace back, returning the
// first event's stack as text, so the test sees exactly what a trace would show.
#include <time.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "profiler/recorder.h"
#include "tests/profiler/trace_test_util.h"
#include "tools/trace/gpumem_reader.h"

extern "C" __attribute__((visibility("default"))) int gpumem_test_record_stack(
    const char* path, const char* mode, char* out, int out_len) {
  gpumem::RecorderOptions options;
  options.path = path;
  auto stack_mode = gpumem::ParseStackMode(mode);
  if (!stack_mode.ok()) return -1;
  options.stacks = *stack_mode;
  auto recorder = gpumem::Recorder::Open(options);
  if (!recorder.ok()) return -2;
  (*recorder)->OnEvent({gpumem::AllocatorEventKind::kAlloc, 0, 0x1000, 512, 0});
  if (!(*recorder)->Close().ok()) return -3;
  auto t = gpumem::trace::ParseGpumemTrace(gpumem::testing::ReadBytes(path), path);
  std::remove(path);
  if (!t.ok() || t->events.size() != 1) return -4;
  std::string text;
  for (std::uint32_t f : t->stacks[t->events[0].stack_id]) {
    const auto& frame = t->frames[f];
    text += frame.filename + ":" + std::to_string(frame.line) + ":" + frame.function + "\n";
  }
  std::snprintf(out, static_cast<std::size_t>(out_len), "%s", text.c_str());
  return static_cast<int>(t->stacks[t->events[0].stack_id].size());
}

// Nanoseconds per recorded allocation with the given stack mode, called from Python so
// the Python stack is real: `depth` extra Python frames are the caller's business.
extern "C" __attribute__((visibility("default"))) double gpumem_test_ns_per_event(
    const char* path, const char* mode, int events) {
  gpumem::RecorderOptions options;
  options.path = path;
  auto stack_mode = gpumem::ParseStackMode(mode);
  if (!stack_mode.ok()) return -1;
  options.stacks = *stack_mode;
  options.writer.ring_records = 1 << 16;
  auto recorder = gpumem::Recorder::Open(options);
  if (!recorder.ok()) return -2;
  // Thread CPU time: what the allocating thread pays, whatever else the machine runs.
  auto cpu_ns = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return std::int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  };
  // The first event makes the thread's ring: not part of the steady state.
  (*recorder)->OnEvent({gpumem::AllocatorEventKind::kAlloc, 0, 0x10, 512, 0});
  const std::int64_t start = cpu_ns();
  for (int i = 0; i < events; ++i) {
    (*recorder)->OnEvent({gpumem::AllocatorEventKind::kAlloc, 0,
                          static_cast<std::uintptr_t>(0x1000 + 512 * i), 512, 0});
  }
  const std::int64_t end = cpu_ns();
  (void)(*recorder)->Close();
  std::remove(path);
  return static_cast<double>(end - start) / events;
}
