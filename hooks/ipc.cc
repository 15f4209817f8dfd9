#include "hooks/ipc.h"

#include <atomic>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "hooks/device_registry.h"
#include "hooks/ipc_fds.h"

namespace gpumem::hooks::ipc {

std::atomic<std::size_t> g_shared_blocks{0};  // by_ptr's size; written under the lock

namespace {

constexpr absl::string_view kHandleMark = "gpumem-ipc1";

struct SharedBlock {
  int device = 0;
  std::size_t size = 0;
  std::string token;
  std::string handle;
  std::size_t offset = 0;
};

struct Registry {
  std::mutex mu;  // guards the maps (std::mutex: ThreadSanitizer sees it)
  absl::flat_hash_map<std::string, DevicePtr> by_token;
  absl::flat_hash_map<DevicePtr, SharedBlock> by_ptr;
  absl::flat_hash_map<DevicePtr, int> opened;  // base -> device
};
Registry& TheRegistry() {
  static Registry* registry = new Registry();  // never destroyed, like the devices
  return *registry;
}

absl::StatusOr<Backend*> BackendOf(int device) {
  absl::StatusOr<DeviceState*> state = GetDevice(device);
  if (!state.ok()) return state.status();
  return (*state)->backend.backend.get();
}

std::string NewToken() {
  std::random_device random;
  return absl::StrFormat("%08x%08x%08x%08x", random(), random(), random(), random());
}

// The pages of the block a receiver names by its token, exported for that receiver.
absl::StatusOr<std::vector<ExportedPage>> PagesOf(absl::string_view token) {
  Registry& r = TheRegistry();
  DevicePtr ptr = 0;
  SharedBlock block;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    const auto known = r.by_token.find(token);
    if (known == r.by_token.end()) {
      return absl::NotFoundError(
          "no block is shared under that token: it was freed since it was sent");
    }
    ptr = known->second;
    block = r.by_ptr.at(ptr);
  }
  absl::StatusOr<Backend*> backend = BackendOf(block.device);
  if (!backend.ok()) return backend.status();
  absl::StatusOr<ExportedPages> pages = (*backend)->ExportPages(ptr, block.size);
  if (!pages.ok()) return pages.status();
  return std::move(pages->pages);
}

struct ParsedHandle {
  std::string socket;
  int device = 0;
  std::string token;
};
absl::StatusOr<ParsedHandle> Parse(absl::string_view handle) {
  const std::vector<std::string> parts = absl::StrSplit(handle, ' ');
  ParsedHandle out;
  if (parts.size() != 4 || parts[0] != kHandleMark || !absl::SimpleAtoi(parts[2], &out.device) ||
      out.device < 0 || out.device >= kMaxDevices) {
    return absl::InvalidArgumentError(
        "not a CUDA memory handle from gpumem: the process that sent the tensor must run "
        "gpumem's allocator too (start both with `gpumem run` or GPUMEM=1)");
  }
  out.socket = parts[1];
  out.token = parts[3];
  return out;
}

// The block's handle and offset, if it was shared before and not freed since.
bool SharedBefore(DevicePtr ptr, int device, std::size_t size, std::string* handle,
                  std::size_t* offset) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.by_ptr.find(ptr);
  if (it == r.by_ptr.end() || it->second.device != device || it->second.size != size) {
    return false;
  }
  *handle = it->second.handle;
  *offset = it->second.offset;
  return true;
}

// Keeps `block` as the one shared at `ptr`, unless another thread shared the same block
// first: then that one stays, so that every sender of the block hands out one handle.
SharedBlock Remember(DevicePtr ptr, SharedBlock block) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (auto old = r.by_ptr.find(ptr); old != r.by_ptr.end()) {
    if (old->second.device == block.device && old->second.size == block.size) return old->second;
    r.by_token.erase(old->second.token);  // a block since freed and made again
  }
  r.by_token[block.token] = ptr;
  const SharedBlock& kept = r.by_ptr[ptr] = std::move(block);
  g_shared_blocks.store(r.by_ptr.size(), std::memory_order_relaxed);
  return kept;  // a copy, made under the lock
}

// Where the caller does not say (device < 0, size 0): the device and bytes of the live
// block at `p`.
absl::Status Locate(DevicePtr p, int* device, std::size_t* size) {
  if (*device >= 0 && *size != 0) return absl::OkStatus();
  bool found = false;
  ForEachStartedDevice([&](DeviceState& s) {
    if (found || (*device >= 0 && s.device != *device)) return;
    const std::size_t bytes = s.allocator->BlockBytes(p);
    if (bytes == 0) return;
    found = true;
    *device = s.device;
    if (*size == 0) *size = bytes;
  });
  if (found) return absl::OkStatus();
  return absl::NotFoundError(
      absl::StrCat("0x", absl::Hex(p), " is not a live block of gpumem's allocator"));
}

}  // namespace

absl::StatusOr<std::string> Share(int device, void* ptr, std::size_t size, std::size_t* offset) {
  const auto p = reinterpret_cast<DevicePtr>(ptr);
  if (absl::Status s = Locate(p, &device, &size); !s.ok()) return s;
  std::string handle;
  if (SharedBefore(p, device, size, &handle, offset)) return handle;
  absl::StatusOr<Backend*> backend = BackendOf(device);
  if (!backend.ok()) return backend.status();
  // Exported now for the first page's place, then again for each receiver that asks: no
  // descriptor stays open in between (a process has few to spare).
  absl::StatusOr<ExportedPages> pages = (*backend)->ExportPages(p, size);
  if (!pages.ok()) return pages.status();
  ClosePages(pages->pages);
  absl::StatusOr<std::string> socket = ServePages(PagesOf);
  if (!socket.ok()) return socket.status();
  SharedBlock block;
  block.device = device;
  block.size = size;
  block.token = NewToken();
  block.offset = p - pages->first_page;
  block.handle = absl::StrCat(kHandleMark, " ", *socket, " ", device, " ", block.token);
  const SharedBlock kept = Remember(p, std::move(block));
  *offset = kept.offset;
  return kept.handle;
}

absl::StatusOr<void*> Open(absl::string_view handle) {
  absl::StatusOr<ParsedHandle> parsed = Parse(handle);
  if (!parsed.ok()) return parsed.status();
  absl::StatusOr<Backend*> backend = BackendOf(parsed->device);
  if (!backend.ok()) return backend.status();
  absl::StatusOr<std::vector<ExportedPage>> pages = FetchPages(parsed->socket, parsed->token);
  if (!pages.ok()) return pages.status();
  absl::StatusOr<DevicePtr> base = (*backend)->ImportPages(*pages);
  ClosePages(*pages);
  if (!base.ok()) return base.status();
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.opened[*base] = parsed->device;
  return reinterpret_cast<void*>(*base);
}

absl::Status Close(void* base) {
  const auto p = reinterpret_cast<DevicePtr>(base);
  int device = 0;
  {
    Registry& r = TheRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    const auto it = r.opened.find(p);
    if (it == r.opened.end()) {
      return absl::NotFoundError("not an address gpumem mapped from another process");
    }
    device = it->second;
    r.opened.erase(it);
  }
  absl::StatusOr<Backend*> backend = BackendOf(device);
  if (!backend.ok()) return backend.status();
  return (*backend)->ReleaseImported(p);
}

void ForgetShared(void* ptr) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto it = r.by_ptr.find(reinterpret_cast<DevicePtr>(ptr));
  if (it == r.by_ptr.end()) return;
  r.by_token.erase(it->second.token);
  r.by_ptr.erase(it);
  g_shared_blocks.store(r.by_ptr.size(), std::memory_order_relaxed);
}

}  // namespace gpumem::hooks::ipc
