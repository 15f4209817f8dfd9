// The line every command that reads a trace prints on stderr when the recording did not
// finish (killed, cut short, damaged): the events it kept and the bytes it lost, in the
// words of `gpumem dump`'s first warning. Such a trace exits 0 when any event reads back;
// one with no readable event is an error (exit 2) like any unreadable input. A ring
// trace's window (what it kept, from when) is said too.
#pragma once

#include <cstdio>

#include "tools/trace/trace.h"

namespace gpumem::cli {

inline void WarnOfLoss(const trace::Trace& t) {
  if (t.loss) std::fprintf(stderr, "warning: %s\n", t.loss->summary.c_str());
  // A ring trace (GPUMEM_TRACE_MAX) holds only its last segments: say from where.
  if (t.ring) std::fprintf(stderr, "note: %s\n", t.ring->summary.c_str());
}

}  // namespace gpumem::cli
