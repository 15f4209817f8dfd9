// The rest of what the gpumem trace reader found damaged (chunks skipped, stacks that were
// lost, counts that disagree), on stderr in `gpumem dump`'s words, after WarnOfLoss's line:
// every command that reads a trace says the same. Other formats' warnings are notes on
// what the reader filled in (a snapshot's segments from before its recording), not loss:
// `dump` and the report show them.
#pragma once

#include <cstdio>
#include <string>

#include "tools/trace/trace.h"

namespace gpumem::cli {

inline void WarnOfDamage(const trace::Trace& t) {
  if (t.format != "gpumem") return;
  for (const std::string& w : t.warnings) {
    // WarnOfLoss said these: the loss, and a ring trace's window (as its note).
    if ((t.loss && w == t.loss->summary) || (t.ring && w == t.ring->summary)) continue;
    if (t.ring && w == t.ring->summary) continue;  // WarnOfLoss said it, as a note
    std::fprintf(stderr, "warning: %s\n", w.c_str());
  }
}

}  // namespace gpumem::cli
