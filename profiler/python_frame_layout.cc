#include "profiler/python_frame_layout.h"

namespace gpumem {

std::optional<PythonFrameLayout> PythonFrameLayoutFor(unsigned long py_version) {
  switch (py_version >> 16) {  // major, minor
    case 0x030B:
      // PyThreadState: prev, next, interp, 8 ints -> cframe at 56. _PyCFrame: uint8_t
      // use_tracing, then current_frame. _PyInterpreterFrame: f_func, f_globals,
      // f_builtins, f_locals, f_code, frame_obj, previous, prev_instr, int stacktop,
      // bool is_entry, char owner.
      return PythonFrameLayout{56, 8, 32, 48, 56, 69, -1};
    case 0x030C:
      // PyThreadState: prev, next, interp, _status, 7 ints -> cframe at 56. _PyCFrame:
      // current_frame first. _PyInterpreterFrame: f_code, previous, f_funcobj, f_globals,
      // f_builtins, f_locals, frame_obj, prev_instr, int stacktop, uint16_t
      // return_offset, char owner; owner 3 (FRAME_OWNED_BY_CSTACK) marks entry shims.
      return PythonFrameLayout{56, 0, 0, 8, 56, 70, 3};
    default:
      return std::nullopt;
  }
}

std::size_t ReadPythonFrames(const PythonFrameLayout& layout, const void* tstate,
                             RawFrame* out, std::size_t max, std::size_t* span,
                             std::uintptr_t code_offset, FrameHasher* hasher) {
  const auto field = [](const void* base, std::size_t offset) {
    return *reinterpret_cast<const std::uintptr_t*>(static_cast<const char*>(base) + offset);
  };
  const auto* cframe = reinterpret_cast<const void*>(field(tstate, layout.cframe));
  if (cframe == nullptr) return 0;
  const auto* frame = reinterpret_cast<const void*>(field(cframe, layout.current_frame));
  const auto top = reinterpret_cast<std::uintptr_t>(frame);
  constexpr std::size_t kMaxSpan = 32 << 10;  // a 200-frame stack; deeper ones walk as is
  if (span != nullptr && frame != nullptr) {
    for (std::size_t back = 0; back <= *span + 64; back += 64) {  // the top frame's 2 lines too
      __builtin_prefetch(reinterpret_cast<const void*>(top + 64 - back));
    }
  }
  std::uintptr_t lowest = top;
  std::size_t n = 0;
  while (frame != nullptr && n < max) {
    const char owner = static_cast<const char*>(frame)[layout.owner];
    if (owner != layout.shim_owner) {
      const std::uintptr_t code = field(frame, layout.code);
      const std::uintptr_t instr = field(frame, layout.prev_instr);
      // A frame not yet past its first instruction may point before its bytecode: 0, as
      // the C API's negative offsets are.
      const std::uintptr_t start = code + code_offset;
      out[n] = RawFrame{code, static_cast<std::uint32_t>(instr > start ? instr - start : 0),
                        RawFrame::kPythonLastiTag};
      if (hasher != nullptr) hasher->Add(out[n]);
      ++n;
    }
    const auto at = reinterpret_cast<std::uintptr_t>(frame);
    if (at < lowest && top - at <= kMaxSpan) lowest = at;  // a generator's frame is elsewhere
    frame = reinterpret_cast<const void*>(field(frame, layout.previous));
  }
  if (span != nullptr) *span = top - lowest;
  return n;
}

}  // namespace gpumem
