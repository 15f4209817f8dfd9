#include "profiler/stack_table.h"

#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdlib>

#include "absl/strings/str_format.h"

namespace gpumem {

std::uint32_t StackTable::Intern(const RawFrame* frames, std::size_t n,
                                 const PythonNamer& namer) {
  if (n == 0) return 0;
  const absl::Span<const RawFrame> key(frames, n);
  const std::size_t hash = SpanHash{}(key);
  Shard& shard = ShardOf(hash);
  std::lock_guard<std::mutex> shard_lock(shard.mu);
  auto it = shard.ids.find(key, hash);
  if (it != shard.ids.end()) return it->second;
  // New stack: intern its frames, then publish it (under the shard lock, so two threads
  // adding the same stack agree on one id).
  std::lock_guard<std::mutex> lock(mu_);
  StackDef def;
  def.id = next_stack_id_++;
  def.frames.reserve(n);
  for (const RawFrame& f : key) def.frames.push_back(InternFrameLocked(f, namer));
  pending_stacks_.push_back(def);
  shard.ids.emplace(std::vector<RawFrame>(key.begin(), key.end()), def.id);
  return def.id;
}

std::uint32_t StackTable::Find(const RawFrame* frames, std::size_t n) const {
  if (n == 0) return 0;
  const absl::Span<const RawFrame> key(frames, n);
  const std::size_t hash = SpanHash{}(key);
  Shard& shard = ShardOf(hash);
  std::lock_guard<std::mutex> lock(shard.mu);
  auto it = shard.ids.find(key, hash);
  return it == shard.ids.end() ? 0 : it->second;
}

std::uint32_t StackTable::InternFrameLocked(const RawFrame& frame, const PythonNamer& namer) {
  if (frame.tag == RawFrame::kNamedTag) return static_cast<std::uint32_t>(frame.a);
  auto [it, inserted] = frame_ids_.try_emplace(frame, next_frame_id_);
  if (!inserted) return it->second;
  FrameDef def;
  def.id = next_frame_id_++;
  std::uint64_t pc = 0;
  if (frame.tag == RawFrame::kPythonTag || frame.tag == RawFrame::kPythonLastiTag) {
    def.kind = format::FrameKind::kPython;
    if (frame.tag == RawFrame::kPythonTag) def.line = static_cast<std::int32_t>(frame.b);
    if (namer) namer(frame, &def);
  } else {
    def.kind = format::FrameKind::kNative;
    pc = frame.a;
  }
  pending_frames_.push_back(std::move(def));
  pending_pcs_.push_back(pc);
  return it->second;
}

std::uint32_t StackTable::InternNamedFrame(format::FrameKind kind, const std::string& function,
                                           const std::string& filename, std::int32_t line) {
  std::lock_guard<std::mutex> lock(mu_);
  NamedKey key{static_cast<std::uint8_t>(kind), function, filename, line};
  auto [it, inserted] = named_ids_.try_emplace(key, next_frame_id_);
  if (!inserted) return it->second;
  FrameDef def{next_frame_id_++, kind, line, function, filename};
  pending_frames_.push_back(std::move(def));
  pending_pcs_.push_back(0);
  return it->second;
}

void StackTable::TakePending(std::vector<FrameDef>* frames, std::vector<StackDef>* stacks) {
  std::vector<std::uint64_t> pcs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    frames->swap(pending_frames_);
    pcs.swap(pending_pcs_);
    stacks->swap(pending_stacks_);
    pending_frames_.clear();
    pending_stacks_.clear();
  }
  // Symbolize outside the lock: dladdr and demangling are slow and the hot path must not
  // wait for them.
  for (std::size_t i = 0; i < frames->size(); ++i) {
    if (pcs[i] != 0) SymbolizeNative(pcs[i], &(*frames)[i].function, &(*frames)[i].filename);
  }
}

std::size_t StackTable::stack_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_stack_id_ - 1;
}

void SymbolizeNative(std::uint64_t pc, std::string* function, std::string* filename) {
  Dl_info info{};
  // A return address points after the call: look up pc - 1 so a call that ends a
  // function still names that function.
  void* addr = reinterpret_cast<void*>(pc);
  if (dladdr(reinterpret_cast<void*>(pc - 1), &info) == 0) {
    *function = absl::StrFormat("0x%x", pc);
    filename->clear();
    return;
  }
  *filename = info.dli_fname != nullptr ? info.dli_fname : "";
  if (info.dli_sname == nullptr) {
    auto base = reinterpret_cast<std::uintptr_t>(info.dli_fbase);
    *function = absl::StrFormat("0x%x", pc - base);
    return;
  }
  int status = 0;
  char* demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
  std::free(demangled);
  auto offset = reinterpret_cast<std::uintptr_t>(addr) -
                reinterpret_cast<std::uintptr_t>(info.dli_saddr);
  *function = absl::StrFormat("%s+0x%x", name, offset);
}

}  // namespace gpumem
