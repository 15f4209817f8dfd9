#include "allocator/policies.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/caching_allocator.h"
#include "allocator/emulation/pytorch_allocator.h"

namespace gpumem {
namespace {

struct PolicyEntry {
  const char* name;
  std::unique_ptr<DeviceAllocator> (*make)(Backend&, const PolicySettings&);
};

// One line per policy; each policy's header provides its factory.
const std::vector<PolicyEntry>& Entries() {
  static const std::vector<PolicyEntry> entries = {
      {"gpumem",
       [](Backend& b, const PolicySettings& s) {
         return MakeCachingAllocator(b, {.page_bytes = s.page_bytes});
       }},
      {"pytorch",
       [](Backend& b, const PolicySettings&) { return emulation::MakePytorchAllocator(b); }},
      {"pytorch-expandable",
       [](Backend& b, const PolicySettings&) {
         return emulation::MakePytorchExpandableAllocator(b);
       }},
  };
  return entries;
}

}  // namespace

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  for (const PolicyEntry& e : Entries()) names.emplace_back(e.name);
  return names;
}

absl::StatusOr<std::unique_ptr<DeviceAllocator>> MakePolicy(absl::string_view name,
                                                            Backend& backend,
                                                            const PolicySettings& settings) {
  for (const PolicyEntry& e : Entries()) {
    if (name == e.name) return e.make(backend, settings);
  }
  return absl::NotFoundError(absl::StrCat("unknown policy '", name, "'; known: ",
                                          absl::StrJoin(PolicyNames(), ", ")));
}

}  // namespace gpumem
