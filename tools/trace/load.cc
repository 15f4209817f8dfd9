#include "tools/trace/load.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "tools/trace/decompress.h"
#include "tools/trace/gpumem_reader.h"
#include "tools/trace/plausible_sizes.h"
#include "tools/trace/ring_reader.h"
#include "tools/trace/snapshot_reader.h"

namespace gpumem::trace {

absl::StatusOr<Trace> LoadTrace(const std::string& path, const ReadProgress& progress) {
  absl::StatusOr<std::unique_ptr<DecompressingReader>> reader =
      DecompressingReader::OpenFile(path);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<absl::string_view> head = (*reader)->Peek();
  if (!head.ok()) return head.status();
  if (head->empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": empty file"));
  absl::StatusOr<Trace> trace = [&]() -> absl::StatusOr<Trace> {
    // Pickles of protocol 2 and above open with PROTO (0x80); they and gpumem traces are
    // parsed from one buffer. The text form streams.
    const bool pickle = static_cast<unsigned char>(head->front()) == 0x80;
    if (!IsGpumemTrace(*head) && !pickle) return ReadTsvTrace(**reader, progress);
    absl::StatusOr<std::string> data = ReadAll(**reader);
    if (!data.ok()) return data.status();
    if (pickle) return ParseSnapshotPickle(*data, path);
    GpumemFileInfo info;
    absl::StatusOr<Trace> parsed = ParseGpumemTrace(*data, path, &info);
    if (!IsRingSegment(info)) return parsed;
    return ReadRing(path, std::move(parsed), info);
  }();
  if (!trace.ok()) return trace;
  if (trace->events.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the trace has no events"));
  }
  if (absl::Status sizes = CheckPlausibleSizes(*trace); !sizes.ok()) return sizes;
  return trace;
}

}  // namespace gpumem::trace
