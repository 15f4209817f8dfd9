// A tiny shared library that python_stacks_test.py loads with ctypes: it records one
// allocation with the recorder (stacks as asked) and reads the trace back, returning the
// first event's stack as text, so the test sees exactly what a trace would show.
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
