// The calling thread's Python frames, read through the CPython C API found at run time
// (dlsym), so nothing here links libpython: in a process without Python, or on a thread
// Python never ran on, there are simply no Python frames.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "profiler/python_frame_layout.h"
#include "profiler/stack_table.h"

namespace gpumem {

class PythonStacks {
  struct Api;

 public:
  // The process-wide instance; it looks for the interpreter on first use.
  static PythonStacks& Get();

  // True if the process has a Python interpreter whose API we found.
  bool available() const { return api_ok_; }

  // Holds the GIL for its lifetime where this thread can read its frames: always if it
  // holds it already; if `may_take`, also a Python thread that released it (PyTorch
  // releases it around every operator) by taking it back. Never take it while holding a
  // lock a GIL holder may wait for (the allocator's): that deadlocks.
  class Gil {
   public:
    Gil(const PythonStacks& py, bool may_take);
    ~Gil();
    Gil(const Gil&) = delete;
    Gil& operator=(const Gil&) = delete;
    bool held() const { return held_; }
    bool took() const { return api_ != nullptr; }  // taken here, not already held

   private:
    const Api* api_ = nullptr;  // set when we took the GIL and must give it back
    int state_ = 0;
    bool held_ = false;
  };

  // Up to `max` frames of the calling thread, innermost first, as (code object, bytecode
  // offset) where the interpreter offers PyFrame_GetLasti (3.11+): the line is then
  // computed once per new frame instead of on every event. Else (code object, line).
  // 0 unless `gil` (this thread's) is held().
  // Each capture also reads the same frames from CPython's structures
  // (profiler/python_frame_layout.h) and compares: after kAgreementsToTrust agreeing
  // stacks, CaptureOwn serves; one disagreement turns it off for good.
  std::size_t Capture(const Gil& gil, RawFrame* out, std::size_t max) const;

  // The same frames as Capture, read without the GIL or any C API call, once the layout
  // has been checked (else nullopt: use Capture). 0 for a thread Python never ran on.
  // `hasher` (optional) takes each frame read.
  std::optional<std::size_t> CaptureOwn(RawFrame* out, std::size_t max,
                                        FrameHasher* hasher = nullptr) const;
  bool own_frames_trusted() const { return own_trusted_.load(std::memory_order_acquire); }
  static constexpr int kAgreementsToTrust = 16;

  // A code object's file and function name; keeps the code object alive so its address
  // names it for the life of the process. Call only while holding the GIL (the stack
  // table calls it for new frames, on the thread that captured them).
  void Name(const RawFrame& frame, FrameDef* def) const;

 private:
  PythonStacks();
  // Under the GIL: compares a C API capture with a raw read of the same thread.
  void CheckOwnFrames(const RawFrame* api_frames, std::size_t n, bool truncated) const;

  const Api* api_;
  bool api_ok_ = false;
  std::optional<PythonFrameLayout> layout_;
  // Checking state, written under the GIL; code_offset_ is published by own_trusted_.
  mutable std::uint32_t code_offset_ = 0;
  mutable int agreements_ = 0;
  mutable std::atomic<bool> own_trusted_{false};
  mutable std::atomic<bool> own_off_{false};
};

}  // namespace gpumem
