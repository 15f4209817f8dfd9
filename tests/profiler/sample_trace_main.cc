// Writes a small gpumem trace for the `gpumem dump` CLI test: alloc, free, a step, a
// failed driver call, each alloc with a two-frame Python-like stack.  Usage: sample_trace PATH [killed]
// With `killed` the program dies by SIGKILL after the allocs (small journal ring, no
// flush after the 50th alloc): of the last 50, those not drained yet are only in the raw
// journal.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "profiler/trace_writer.h"

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) return 2;
  const bool killed = argc == 3 && std::string(argv[2]) == "killed";
  gpumem::TraceWriterOptions options;
  options.path = argv[1];
  if (killed) {
    options.ring_records = 64;
    options.flush_interval_ms = 3600000;
  }
  options.header["stacks"] = "python";
  auto writer = gpumem::TraceWriter::Open(options);
  if (!writer.ok()) return 1;
  gpumem::StackTable& stacks = (*writer)->stacks();
  gpumem::RawFrame frames[2] = {
      {stacks.InternNamedFrame(gpumem::format::FrameKind::kPython, "Linear.forward",
                               "model.py", 42),
       0, gpumem::RawFrame::kNamedTag},
      {stacks.InternNamedFrame(gpumem::format::FrameKind::kPython, "train", "train.py", 7), 0,
       gpumem::RawFrame::kNamedTag}};
  const std::uint32_t stack = stacks.Intern(frames, 2);
  auto record = [&](gpumem::format::RecordType type, std::uint64_t addr, std::uint64_t size,
                    std::uint32_t stack_id) {
    gpumem::RawRecord r;
    r.type = type;
    r.time_ns = gpumem::TraceWriter::NowNs();
    r.addr = addr;
    r.size = size;
    r.stream = 0x10;
    r.stack_id = stack_id;
    (*writer)->Record(r);
  };
  for (int i = 0; i < 100; ++i) {
    record(gpumem::format::RecordType::kAlloc, 0x7f0000000000 + 0x1000 * i, 4096, stack);
    if (i % 10 == 9 && (!killed || i < 50)) (*writer)->Flush();  // several chunks
  }
  if (killed) kill(getpid(), SIGKILL);
  record(gpumem::format::RecordType::kFree, 0x7f0000000000, 4096, 0);
  record(gpumem::format::RecordType::kStep, 0, 1, 0);
  // A library's cuMemAlloc of 256 MiB that failed (CUDA_ERROR_OUT_OF_MEMORY).
  record(gpumem::format::RecordType::kFailedAlloc,
         gpumem::format::FailedCallWord(gpumem::format::MemoryApiOf("cuMemAlloc"), 2),
         256u << 20, stack);
  return (*writer)->Close().ok() ? 0 : 1;
}
