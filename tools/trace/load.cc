#include "tools/trace/load.h"

#include "absl/strings/str_cat.h"
#include "tools/trace/decompress.h"
#include "tools/trace/gpumem_reader.h"
#include "tools/trace/snapshot_reader.h"
#include "tools/trace/tsv_reader.h"

namespace gpumem::trace {

absl::StatusOr<Trace> LoadTrace(const std::string& path) {
  absl::StatusOr<std::string> data = ReadFileDecompressed(path);
  if (!data.ok()) return data.status();
  if (data->empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": empty file"));
  absl::StatusOr<Trace> trace = [&]() -> absl::StatusOr<Trace> {
    if (IsGpumemTrace(*data)) return ParseGpumemTrace(*data, path);
    // Pickles of protocol 2 and above open with PROTO (0x80).
    if (static_cast<unsigned char>((*data)[0]) == 0x80) return ParseSnapshotPickle(*data, path);
    return ParseTsvTrace(*data, path);
  }();
  if (trace.ok() && trace->events.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the trace has no events"));
  }
  return trace;
}

}  // namespace gpumem::trace
