#include "profiler/python_stack.h"

#include "profiler/chunk_encoder.h"

#include <dlfcn.h>

namespace gpumem {

// The few CPython functions used, by their stable C API names (3.9+ for
// PyFrame_GetCode / PyFrame_GetBack). PyObject* is opaque here.
struct PythonStacks::Api {
  using Obj = void*;
  int (*Py_IsInitialized)() = nullptr;
  int (*PyGILState_Check)() = nullptr;
  Obj (*PyGILState_GetThisThreadState)() = nullptr;
  int (*PyGILState_Ensure)() = nullptr;  // PyGILState_STATE is an enum: an int
  void (*PyGILState_Release)(int) = nullptr;
  Obj (*PyEval_GetFrame)() = nullptr;           // borrowed
  Obj (*PyFrame_GetBack)(Obj) = nullptr;        // new reference
  Obj (*PyFrame_GetCode)(Obj) = nullptr;        // new reference
  int (*PyFrame_GetLineNumber)(Obj) = nullptr;
  Obj (*PyObject_GetAttrString)(Obj, const char*) = nullptr;  // new reference
  const char* (*PyUnicode_AsUTF8)(Obj) = nullptr;
  void (*Py_IncRef)(Obj) = nullptr;
  void (*Py_DecRef)(Obj) = nullptr;
  void (*PyErr_Clear)() = nullptr;
  void (*PyErr_Fetch)(Obj*, Obj*, Obj*) = nullptr;
  void (*PyErr_Restore)(Obj, Obj, Obj) = nullptr;
  // Optional (3.11+): cheaper than a line number per frame per event.
  int (*PyFrame_GetLasti)(Obj) = nullptr;
  int (*PyCode_Addr2Line)(Obj, int) = nullptr;
};

namespace {

template <typename F>
bool Find(F* fn, const char* name) {
  *fn = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  return *fn != nullptr;
}

}  // namespace

PythonStacks& PythonStacks::Get() {
  static PythonStacks* instance = new PythonStacks();  // never destroyed: used at exit
  return *instance;
}

PythonStacks::PythonStacks() {
  auto* api = new Api();
  api_ok_ = Find(&api->Py_IsInitialized, "Py_IsInitialized") &&
            Find(&api->PyGILState_Check, "PyGILState_Check") &&
            Find(&api->PyGILState_GetThisThreadState, "PyGILState_GetThisThreadState") &&
            Find(&api->PyGILState_Ensure, "PyGILState_Ensure") &&
            Find(&api->PyGILState_Release, "PyGILState_Release") &&
            Find(&api->PyEval_GetFrame, "PyEval_GetFrame") &&
            Find(&api->PyFrame_GetBack, "PyFrame_GetBack") &&
            Find(&api->PyFrame_GetCode, "PyFrame_GetCode") &&
            Find(&api->PyFrame_GetLineNumber, "PyFrame_GetLineNumber") &&
            Find(&api->PyObject_GetAttrString, "PyObject_GetAttrString") &&
            Find(&api->PyUnicode_AsUTF8, "PyUnicode_AsUTF8") &&
            Find(&api->Py_IncRef, "Py_IncRef") && Find(&api->Py_DecRef, "Py_DecRef") &&
            Find(&api->PyErr_Clear, "PyErr_Clear") && Find(&api->PyErr_Fetch, "PyErr_Fetch") &&
            Find(&api->PyErr_Restore, "PyErr_Restore");
  if (!Find(&api->PyFrame_GetLasti, "PyFrame_GetLasti") ||
      !Find(&api->PyCode_Addr2Line, "PyCode_Addr2Line")) {
    api->PyFrame_GetLasti = nullptr;
  }
  api_ = api;
  // Py_Version (3.11+) is the running interpreter's PY_VERSION_HEX, whatever headers
  // anything was built with.
  const auto* version = static_cast<const unsigned long*>(dlsym(RTLD_DEFAULT, "Py_Version"));
  if (api_ok_ && version != nullptr && api->PyFrame_GetLasti != nullptr) {
    layout_ = PythonFrameLayoutFor(*version);
  }
}

PythonStacks::Gil::Gil(const PythonStacks& py, bool may_take) {
  if (!py.api_ok_ || !py.api_->Py_IsInitialized()) return;
  if (py.api_->PyGILState_Check()) {
    held_ = true;
    return;
  }
  // PyTorch releases the GIL before it runs an operator, so an allocation almost never
  // arrives with the GIL held. A thread with a Python thread state is a Python thread in
  // C code: its frames are still there, and taking the GIL back (as PyTorch's own
  // _record_memory_history does) lets us read them. Threads Python never saw (autograd
  // engine workers) have no frames: no GIL taken, no thread state created for them.
  if (!may_take || py.api_->PyGILState_GetThisThreadState() == nullptr) return;
  api_ = py.api_;
  state_ = api_->PyGILState_Ensure();
  held_ = true;
}

PythonStacks::Gil::~Gil() {
  if (api_ != nullptr) api_->PyGILState_Release(state_);
}

std::size_t PythonStacks::Capture(const Gil& gil, RawFrame* out, std::size_t max) const {
  if (!gil.held()) return 0;  // held() also means the interpreter is up
  // Five calls per frame (about 7 ns, most of a deep stack's cost; the rest is the GIL
  // and, for frames new since the last capture, PyFrame_GetBack making their objects).
  void* frame = api_->PyEval_GetFrame();
  if (frame == nullptr) return 0;
  api_->Py_IncRef(frame);  // uniform ownership: every frame below is a new reference
  std::size_t n = 0;
  while (frame != nullptr && n < max) {
    void* code = api_->PyFrame_GetCode(frame);
    if (api_->PyFrame_GetLasti != nullptr) {
      const int lasti = api_->PyFrame_GetLasti(frame);
      out[n++] = RawFrame{reinterpret_cast<std::uint64_t>(code),
                          static_cast<std::uint32_t>(lasti < 0 ? 0 : lasti),
                          RawFrame::kPythonLastiTag};
    } else {
      const int line = api_->PyFrame_GetLineNumber(frame);
      out[n++] = RawFrame{reinterpret_cast<std::uint64_t>(code),
                          static_cast<std::uint32_t>(line < 0 ? 0 : line), RawFrame::kPythonTag};
    }
    api_->Py_DecRef(code);  // Name() keeps the ones that end up in the table alive
    void* back = api_->PyFrame_GetBack(frame);
    api_->Py_DecRef(frame);
    frame = back;
  }
  if (frame != nullptr) api_->Py_DecRef(frame);
  if (layout_.has_value() && !own_off_.load(std::memory_order_relaxed)) {
    CheckOwnFrames(out, n, frame != nullptr);
  }
  return n;
}

std::optional<std::size_t> PythonStacks::CaptureOwn(RawFrame* out, std::size_t max,
                                                     FrameHasher* hasher) const {
  if (!own_trusted_.load(std::memory_order_acquire) || !api_->Py_IsInitialized()) {
    return std::nullopt;
  }
  const void* tstate = api_->PyGILState_GetThisThreadState();
  if (tstate == nullptr) return 0;  // a thread Python never ran on: no frames
  thread_local std::size_t span = 0;  // see ReadPythonFrames
  return ReadPythonFrames(*layout_, tstate, out, max, &span, code_offset_, hasher);
}

void PythonStacks::CheckOwnFrames(const RawFrame* api_frames, std::size_t n,
                                  bool truncated) const {
  if (n == 0) return;
  const void* tstate = api_->PyGILState_GetThisThreadState();
  if (tstate == nullptr) return;
  constexpr std::size_t kMax = 256;
  RawFrame own[kMax];
  const std::size_t max = truncated ? n : kMax;
  if (max > kMax) return;
  if (code_offset_ == 0) {
    // Learn offsetof(PyCodeObject, co_code_adaptive) from the raw offsets of a frame past
    // its first instruction; the read below then checks it on every frame.
    const std::size_t raw_n = ReadPythonFrames(*layout_, tstate, own, max);
    for (std::size_t i = 0; raw_n == n && i < n && code_offset_ == 0; ++i) {
      if (api_frames[i].b > 0 && own[i].b > api_frames[i].b) {
        code_offset_ = own[i].b - api_frames[i].b;
      }
    }
    if (raw_n == n && code_offset_ == 0) return;  // nothing to learn it from yet
  }
  // The very read CaptureOwn makes, offsets included.
  const std::size_t own_n = ReadPythonFrames(*layout_, tstate, own, max, nullptr, code_offset_);
  bool agree = own_n == n;
  for (std::size_t i = 0; agree && i < n; ++i) agree = own[i] == api_frames[i];
  if (!agree) {
    // Not the layout we think: never read it again.
    own_off_.store(true, std::memory_order_relaxed);
    own_trusted_.store(false, std::memory_order_release);
    return;
  }
  if (++agreements_ == kAgreementsToTrust) own_trusted_.store(true, std::memory_order_release);
}

void PythonStacks::Name(const RawFrame& frame, FrameDef* def) const {
  if (!api_ok_) return;
  std::string* filename = &def->filename;
  std::string* function = &def->function;
  void* obj = reinterpret_cast<void*>(frame.a);
  api_->Py_IncRef(obj);  // once per new frame: the address stays this code object's
  // An allocation may happen while an exception is being raised: keep it intact.
  void *err_type = nullptr, *err_value = nullptr, *err_tb = nullptr;
  api_->PyErr_Fetch(&err_type, &err_value, &err_tb);
  auto attr = [&](const char* name, std::string* out) {
    void* value = api_->PyObject_GetAttrString(obj, name);
    if (value == nullptr) {
      api_->PyErr_Clear();
      return;
    }
    const char* utf8 = api_->PyUnicode_AsUTF8(value);
    if (utf8 != nullptr) {
      *out = utf8;
    } else {
      api_->PyErr_Clear();
    }
    api_->Py_DecRef(value);
  };
  attr("co_filename", filename);
  attr("co_qualname", function);
  if (function->empty()) attr("co_name", function);  // before 3.11
  if (frame.tag == RawFrame::kPythonLastiTag && api_->PyCode_Addr2Line != nullptr) {
    def->line = api_->PyCode_Addr2Line(obj, static_cast<int>(frame.b));
  }
  api_->PyErr_Restore(err_type, err_value, err_tb);
}

}  // namespace gpumem
