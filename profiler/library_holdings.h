// What this process's own libraries outside the allocator (NCCL, cuBLAS, cuDNN, and the
// rest as report::OutsideLibrary::kOther: a CUDA extension, another framework's pool) hold
// on each device, by library and by the site that took it. The CUPTI tracer keeps it as it
// records their driver allocations; the dying process adds the unusual libraries' memory
// to what other processes hold when it asks whether memory held outside the allocator
// ended the run (report::HeldOutsideExplains), and any library's that grew step by step.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "tools/report/library_kind.h"

namespace gpumem {

class LibraryHoldings {
 public:
  static constexpr int kMaxDevices = 64;
  using Library = report::OutsideLibrary;

  // A device allocation known by `key` (its address, or its handle) that `site` made
  // through `library` (empty: the library's own thread, no user's line).
  void OnAlloc(std::uint64_t key, std::int32_t device, Library library, std::uint64_t bytes,
               const std::string& site);
  // Its release; a key never counted is ignored.
  void OnFree(std::uint64_t key);

  std::uint64_t Bytes(std::int32_t device, Library library) const;
  // The site whose allocations through `library` hold most on the device; empty where
  // none with a site hold any.
  std::string TopSite(std::int32_t device, Library library) const;
  // Devices 0..kMaxDevices-1 on which any library ever held any, one bit each.
  std::uint64_t Devices() const;

 private:
  void OnFreeLocked(std::uint64_t key);

  struct Block {
    std::int32_t device = 0;
    Library library = Library::kOther;
    std::uint64_t bytes = 0;
    std::uint32_t site = 0;
  };
  mutable std::mutex mu_;
  absl::flat_hash_map<std::uint64_t, Block> blocks_;
  std::vector<std::string> sites_;
  absl::flat_hash_map<std::string, std::uint32_t> site_ids_;
  absl::flat_hash_map<std::tuple<std::int32_t, Library, std::uint32_t>, std::uint64_t> by_site_;
  absl::flat_hash_map<std::pair<std::int32_t, Library>, std::uint64_t> by_library_;
  std::uint64_t devices_ = 0;
};

}  // namespace gpumem
