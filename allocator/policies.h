// Every allocation policy by its command-line name, so replay, benchmarks and the C ABI
// choose one the same way.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "allocator/backend.h"
#include "allocator/device_allocator.h"

namespace gpumem {

// "gpumem", "pytorch", "pytorch-expandable". The allocator uses `backend`, which must
// outlive it. NotFound for an unknown name, with the known names in the message.
absl::StatusOr<std::unique_ptr<DeviceAllocator>> MakePolicy(absl::string_view name,
                                                            Backend& backend);

// The names MakePolicy accepts, in a stable order.
std::vector<std::string> PolicyNames();

}  // namespace gpumem
