// PyTorch records allocator history into a ring buffer, and recording may start mid-run,
// so a snapshot's events can free blocks they never allocated and its end state can hold
// segments and blocks that no event created. Replay needs the state at the first event:
// this puts it back as synthesized events at the start.
#pragma once

#include "tools/trace/trace.h"

namespace gpumem::trace {

// Per device, prepends (all with the first event's time):
//  - a segment_alloc for each segment that is freed (segment_free) before any
//    segment_alloc at its address, or that exists at the end (trace->segments) with no
//    segment event inside it; for an expandable segment, a segment_map for each piece of
//    its range that no segment_map in the trace covers;
//  - an alloc for each block freed (free_requested) before any alloc at its address, plus a
//    free_requested where its first event is free_completed, and an alloc for each block
//    allocated at the end whose address no event touches (with the block's stack).
// Adds one warning per kind of repair, with counts. Does nothing on a consistent trace.
void SynthesizePrelude(Trace* trace);

}  // namespace gpumem::trace
