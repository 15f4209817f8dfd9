// The calling thread's Python frames read straight from CPython's own structures, with no
// GIL and no C API call. PyTorch releases the GIL around every operator, so the C API
// path (profiler/python_stack.h) takes it back for each allocation and makes a frame
// object for every frame new since the last capture: about a microsecond per allocation
// on an H100 in resnet50's forward, most of the recorder's overhead.
//
// Reading without the GIL is safe for the calling thread's own frames only: a thread's
// frame chain changes only while that thread runs Python, and it is running us; each
// frame holds its code object. These structures are CPython internals, fixed within a
// minor version: the layouts below are 3.11's and 3.12's (pycore_frame.h, pystate.h).
// PythonStacks trusts them only after they agreed with the C API on real stacks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "profiler/stack_table.h"

namespace gpumem {

struct PythonFrameLayout {
  std::size_t cframe;         // PyThreadState::cframe (_PyCFrame*)
  std::size_t current_frame;  // _PyCFrame::current_frame (_PyInterpreterFrame*)
  std::size_t code;           // _PyInterpreterFrame::f_code
  std::size_t previous;       // _PyInterpreterFrame::previous
  std::size_t prev_instr;     // _PyInterpreterFrame::prev_instr (_Py_CODEUNIT*)
  std::size_t owner;          // _PyInterpreterFrame::owner (char)
  int shim_owner;             // FRAME_OWNED_BY_CSTACK: entry shims, not Python code; -1: none
};

// The layout of the interpreter whose `Py_Version` (PY_VERSION_HEX) is given, if known.
std::optional<PythonFrameLayout> PythonFrameLayoutFor(unsigned long py_version);

// Up to `max` frames of `tstate` (the calling thread's PyThreadState), innermost first,
// as {code object, byte offset of prev_instr from the code object's start less
// `code_offset`, kPythonLastiTag}. With `code_offset` = offsetof(PyCodeObject,
// co_code_adaptive), which the caller learns by reading once with 0 and comparing, that
// is the C API's bytecode offset (PyFrame_GetLasti); an offset before the bytecode reads 0.
//
// `span` (optional, per thread) remembers how far below the innermost frame the outermost
// one lay last time. Frames sit in one contiguous data stack, and in training the outer
// ones have gone cold in cache since the last allocation: the whole span is prefetched
// first, so the misses overlap instead of queueing behind each `previous` pointer (H100,
// resnet50: 426 -> 380 ns per capture on average, lookup included).
//
// `hasher` (optional) takes each frame read, for StackTable::Find.
std::size_t ReadPythonFrames(const PythonFrameLayout& layout, const void* tstate,
                             RawFrame* out, std::size_t max, std::size_t* span = nullptr,
                             std::uintptr_t code_offset = 0, FrameHasher* hasher = nullptr);

}  // namespace gpumem
