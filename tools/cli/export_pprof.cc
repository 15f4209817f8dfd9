#include "tools/cli/export_pprof.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/report/report.h"

#ifdef GPUMEM_HAVE_PPROF
#include "tools/pprof/pprof_export.h"
#endif

namespace gpumem::cli {

#ifdef GPUMEM_HAVE_PPROF

absl::Status PprofAvailable() { return absl::OkStatus(); }

absl::StatusOr<std::string> PprofExport(const trace::Trace& trace, const report::ProfilePoint& at,
                                        std::string* moment) {
  report::ReportOptions options;
  options.replay_fragmentation = false;  // only the steps, the peak and the OOMs are needed
  const report::Report r = report::BuildReport(trace, options);
  absl::StatusOr<report::StackProfile> profile = report::BuildStackProfile(r, at);
  if (!profile.ok()) return profile.status();
  *moment = absl::StrCat(profile->description, ": ", profile->inuse_bytes, " bytes live");
  return pprof::ExportPprof(trace, *profile);
}

#else

absl::Status PprofAvailable() {
  return absl::UnimplementedError(
      "pprof export was not built: CMake did not find Protobuf when gpumem was built "
      "(apt-get install libprotobuf-dev protobuf-compiler, then rebuild)");
}

absl::StatusOr<std::string> PprofExport(const trace::Trace&, const report::ProfilePoint&,
                                        std::string*) {
  return PprofAvailable();
}

#endif

}  // namespace gpumem::cli
