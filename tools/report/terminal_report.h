// The default `gpumem report` output: the verdict and the top suspects on one screen.
#pragma once

#include <string>

#include "tools/report/report.h"

namespace gpumem::report {

std::string FormatTerminal(const Report& report, bool color);

}  // namespace gpumem::report
