// The annotation that carries NVML's figures of a device's processes in a trace (type 11,
// on the device): written at step ends where the driver's figure rose, and at an OOM.
//   "gpumem: device memory by process: step=12 self=13350000000 others=4242:643825664,77:2"
// self=? where NVML did not list this process; others= empty where it is alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "profiler/process_memory.h"

namespace gpumem::format {

inline constexpr absl::string_view kProcessNotePrefix = "gpumem: device memory by process: ";

struct ProcessNote {
  std::uint64_t step = 0;  // the steps finished when it was read
  DeviceProcesses processes;
};

std::string ProcessNoteText(const ProcessNote& note);

// nullopt where `text` is not such a note or is malformed.
std::optional<ProcessNote> ParseProcessNote(absl::string_view text);

}  // namespace gpumem::format
