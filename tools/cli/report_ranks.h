// `gpumem report` over several traces (one per rank of a job) without --html: each trace
// is read and analysed on its own, two at a time, and only its summary and formatted
// report are kept, so that hundreds of ranks fit in bounded memory.
#pragma once

#include <string>
#include <vector>

#include "tools/report/report.h"

namespace gpumem::cli {

// Prints the merged view (and, for a few ranks, each one's report; for many, those of
// the ranks that differ). A trace that cannot be read is named and the rest reported;
// the exit status then says bad input.
int ReportRanks(const std::vector<std::string>& paths, const report::ReportOptions& options,
                bool json);

}  // namespace gpumem::cli
