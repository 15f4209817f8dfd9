#include "tools/report/outside_allocator.h"

#include <algorithm>
#include <vector>

#include "tools/report/outside_changes.h"

namespace gpumem::report {
namespace {

struct State {
  std::array<std::int64_t, kBuckets> bytes{};

  std::uint64_t Get(std::size_t bucket) const {
    return static_cast<std::uint64_t>(std::max<std::int64_t>(bytes[bucket], 0));
  }
  std::uint64_t Held() const {  // the allocator's and the outside libraries' device memory
    std::uint64_t sum = Get(kReservedBucket);
    for (std::size_t i = 0; i < kOutsideLibraries; ++i) sum += Get(i);
    return sum;
  }
  OutsideMoment Moment(std::int64_t time_us) const {
    OutsideMoment m;
    m.time_us = time_us;
    m.reserved = Get(kReservedBucket);
    m.pinned_host = Get(kPinnedBucket);
    for (std::size_t i = 0; i < kOutsideLibraries; ++i) m.by_library[i] = Get(i);
    return m;
  }
};

// Replays the changes up to and including `time_us`, from where `next` stands.
void Advance(const std::vector<MemoryChange>& changes, std::int64_t time_us, std::size_t* next,
             State* s) {
  for (; *next < changes.size() && changes[*next].time_us <= time_us; ++*next) {
    s->bytes[changes[*next].bucket] += changes[*next].bytes;
  }
}

void SetDriver(OutsideMoment* m, std::uint64_t free, std::optional<std::uint64_t> total) {
  m->driver_total = total;
  if (total) m->driver_used = *total - std::min(*total, free);
}

// One moment per driver reading; the peak is the one with the most memory in use.
void FromSamples(const OutsideChanges& c, std::optional<std::uint64_t> total,
                 OutsideAllocator* out) {
  State s;
  std::size_t next = 0;
  for (const DriverSample& d : c.samples) {
    Advance(c.changes, d.time_us, &next, &s);
    OutsideMoment m = s.Moment(d.time_us);
    m.step = d.step;
    SetDriver(&m, d.free, d.total ? d.total : total);
    const std::uint64_t used = m.driver_used.value_or(m.reserved + m.outside());
    if (!out->peak ||
        used > out->peak->driver_used.value_or(out->peak->reserved + out->peak->outside())) {
      out->peak = m;
    }
    out->end = m;
  }
}

// Without driver readings: the moment the allocator and the outside libraries held most.
void FromChanges(const OutsideChanges& c, OutsideAllocator* out) {
  State s;
  std::uint64_t best = 0;
  for (const MemoryChange& change : c.changes) {
    s.bytes[change.bucket] += change.bytes;
    if (s.Held() >= best) {
      best = s.Held();
      out->peak = s.Moment(change.time_us);
    }
  }
  out->end = s.Moment(c.changes.empty() ? 0 : c.changes.back().time_us);
}

OutsideMoment AtDeath(const OutsideChanges& c, const OutsideEnd& died,
                      std::optional<std::uint64_t> total) {
  State s;
  std::size_t next = 0;
  Advance(c.changes, died.time_us, &next, &s);
  OutsideMoment m = s.Moment(died.time_us);
  if (died.driver_free) SetDriver(&m, *died.driver_free, total);
  return m;
}

struct NoteAt {
  std::int64_t time_us = 0;
  format::ProcessNote note;
};

// The NVML notes the recorder wrote for `device`, in time order.
std::vector<NoteAt> ProcessNotes(const trace::Trace& trace, int device) {
  std::vector<NoteAt> notes;
  for (const trace::Annotation& a : trace.annotations) {
    if (a.device != device) continue;
    if (std::optional<format::ProcessNote> note = format::ParseProcessNote(a.name)) {
      notes.push_back({a.time_us, *std::move(note)});
    }
  }
  std::stable_sort(notes.begin(), notes.end(),
                   [](const NoteAt& a, const NoteAt& b) { return a.time_us < b.time_us; });
  return notes;
}

// The note read at the moment: at its step end (a step moment), or the first after it (the
// OOM's, written as the verdict is made); else the latest before it.
std::optional<ProcessesAt> ProcessesFor(const std::vector<NoteAt>& notes,
                                        const OutsideMoment& m, bool death) {
  const NoteAt* before = nullptr;
  for (const NoteAt& n : notes) {
    if (m.step && !death && n.note.step == *m.step) return ProcessesAt{n.note, true};
    if (death && n.time_us >= m.time_us) return ProcessesAt{n.note, true};
    if (n.time_us <= m.time_us) before = &n;
  }
  if (before == nullptr) return std::nullopt;
  return ProcessesAt{before->note, false};
}

// The libraries' bytes together after each of their changes.
std::vector<HeldOutsideAt> HeldOverTime(const OutsideChanges& c) {
  std::vector<HeldOutsideAt> out;
  std::int64_t held = 0;
  for (const MemoryChange& change : c.changes) {
    if (change.bucket >= kOutsideLibraries) continue;
    held += change.bytes;
    out.push_back({change.time_us, static_cast<std::uint64_t>(std::max<std::int64_t>(held, 0))});
  }
  return out;
}

}  // namespace

std::uint64_t OutsideMoment::outside() const {
  std::uint64_t sum = 0;
  for (std::uint64_t b : by_library) sum += b;
  return sum;
}

std::optional<std::uint64_t> OutsideMoment::remainder() const {
  if (!driver_used) return std::nullopt;
  const std::uint64_t seen = reserved + outside();
  return *driver_used > seen ? *driver_used - seen : 0;
}

std::optional<std::uint64_t> OutsideMoment::context_and_unseen() const {
  if (!processes || !processes->at_moment || !processes->note.processes.self) return std::nullopt;
  const std::uint64_t self = *processes->note.processes.self;
  const std::uint64_t seen = reserved + outside();
  return self > seen ? self - seen : 0;
}

std::optional<std::int64_t> OutsideMoment::unnamed() const {
  if (!driver_used || !context_and_unseen()) return std::nullopt;
  const DeviceProcesses& p = processes->note.processes;
  return static_cast<std::int64_t>(*driver_used) - static_cast<std::int64_t>(*p.self) -
         static_cast<std::int64_t>(p.others_bytes());
}

OutsideAllocator FindOutsideAllocator(const trace::Trace& trace, const trace::Trace* cupti,
                                      int device, const std::optional<OutsideEnd>& died) {
  OutsideAllocator out;
  out.device = device;
  const OutsideChanges c = CollectOutsideChanges(trace, cupti, device);
  out.calls_recorded = c.calls_recorded;
  out.driver_sampled = !c.samples.empty();
  out.held_over_time = HeldOverTime(c);
  const std::optional<std::uint64_t> total = DriverTotal(trace, device);
  if (out.driver_sampled) {
    FromSamples(c, total, &out);
  } else {
    FromChanges(c, &out);
  }
  if (died) {
    out.end = AtDeath(c, *died, total);
    out.end_is = died->what;
  }
  const std::vector<NoteAt> notes = ProcessNotes(trace, device);
  if (out.peak) out.peak->processes = ProcessesFor(notes, *out.peak, false);
  if (out.end) out.end->processes = ProcessesFor(notes, *out.end, died.has_value());
  return out;
}

}  // namespace gpumem::report
