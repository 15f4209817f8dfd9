#include "tools/trace/ring_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "profiler/trace_format.h"
#include "tools/trace/frame_table.h"

namespace gpumem::trace {
namespace {

struct RingSegment {
  Trace trace;
  GpumemFileInfo info;
};

std::string HeaderValue(const GpumemFileInfo& info, const std::string& key) {
  auto it = info.header.find(key);
  return it == info.header.end() ? "" : it->second;
}

std::uint64_t HeaderNumber(const GpumemFileInfo& info, const std::string& key) {
  std::uint64_t v = 0;
  return absl::SimpleAtoi(HeaderValue(info, key), &v) ? v : 0;
}

std::string Folder(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

// Segment `k` of the ring `ring_id`, or nullopt where there is none (deleted, another
// ring's, unreadable: `note` says which of the last two).
std::optional<RingSegment> LoadSegment(const std::string& folder, const std::string& base,
                                   const std::string& ring_id, std::uint64_t k,
                                   std::string* note) {
  const std::string path = folder + format::RingSegmentName(base, k);
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  RingSegment s;
  absl::StatusOr<Trace> t = ParseGpumemTrace(bytes, path, &s.info);
  if (!t.ok()) {
    *note = absl::StrCat(path, " left out: ", t.status().message());
    return std::nullopt;
  }
  if (HeaderValue(s.info, "ring_id") != ring_id) {
    *note = absl::StrCat(path, " left out: another recording's segment");
    return std::nullopt;
  }
  s.trace = *std::move(t);
  return s;
}

// Appends `from` (a later segment) to `into`, leaving out its checkpoint's blocks.
void Append(RingSegment from, FrameTable* table, Trace* into) {
  std::vector<std::uint32_t> frame_ids(from.trace.frames.size());
  for (std::size_t f = 0; f < frame_ids.size(); ++f) {
    frame_ids[f] = table->Intern(from.trace.frames[f]);
  }
  std::vector<std::uint32_t> stack_ids(from.trace.stacks.size());
  for (std::size_t s = 1; s < stack_ids.size(); ++s) {
    std::vector<std::uint32_t> frames;
    for (std::uint32_t f : from.trace.stacks[s]) frames.push_back(frame_ids[f]);
    stack_ids[s] = table->InternStack(frames);
  }
  const auto& events = from.trace.events;
  for (std::size_t i = from.info.checkpoint_events; i < events.size(); ++i) {
    into->events.push_back(events[i]);
    into->events.back().stack_id = stack_ids[events[i].stack_id];
  }
  for (FailedAllocation& f : from.trace.failed_allocations) {
    f.stack_id = stack_ids[f.stack_id];
    into->failed_allocations.push_back(std::move(f));
  }
  for (Annotation& a : from.trace.annotations) into->annotations.push_back(std::move(a));
  for (const CapacityChange& c : from.trace.capacity_changes) into->capacity_changes.push_back(c);
  for (std::string& w : from.trace.warnings) into->warnings.push_back(std::move(w));
  if (from.trace.loss) into->loss = std::move(from.trace.loss);  // the newest's counts
  into->run = from.trace.run;
  if (from.trace.device_capacity) into->device_capacity = from.trace.device_capacity;
}

template <typename T>
void SortByTime(std::vector<T>* v) {
  auto by_time = [](const T& a, const T& b) { return a.time_us < b.time_us; };
  if (!std::is_sorted(v->begin(), v->end(), by_time)) std::stable_sort(v->begin(), v->end(), by_time);
}

RingWindow Window(const Trace& t, const std::map<std::uint64_t, RingSegment>& kept,
                  std::uint64_t checkpoint_events, std::uint64_t max_bytes) {
  RingWindow w;
  w.first_segment = kept.begin()->first;
  w.last_segment = kept.rbegin()->first;
  w.max_bytes = max_bytes;
  w.dropped = w.first_segment > 0;
  w.start_us = t.events.empty() ? 0 : t.events.front().time_us;
  for (std::size_t i = 0; i < checkpoint_events && i < t.events.size(); ++i) {
    if (t.events[i].action != Action::kAlloc) continue;
    ++w.checkpoint_blocks;
    w.checkpoint_bytes += t.events[i].size;
  }
  for (const Event& e : t.events) {
    if (e.action != Action::kStep) continue;
    w.first_step = e.size;
    break;
  }
  const std::string head = absl::StrCat("ring trace (GPUMEM_TRACE_MAX=", max_bytes,
                                        " bytes): segments ", w.first_segment, " to ",
                                        w.last_segment, " kept");
  if (!w.dropped) {
    w.summary = absl::StrCat(head, "; nothing dropped yet");
    return w;
  }
  w.summary = absl::StrCat(
      head, "; what was recorded before ",
      absl::StrFormat("%.3f", static_cast<double>(w.start_us) / 1e6),
      " s after the recording began was dropped",
      w.first_step ? absl::StrCat(" (the first step record kept is step ", *w.first_step, ")")
                   : "",
      "; the ", w.checkpoint_blocks, " blocks (", w.checkpoint_bytes,
      " bytes) live then, and the device memory then held, come from the checkpoint and "
      "are shown as allocated at that time");
  return w;
}

}  // namespace

bool IsRingSegment(const GpumemFileInfo& info) {
  return info.header.count("ring_id") != 0 && info.header.count("ring_segment") != 0;
}

absl::StatusOr<Trace> ReadRing(const std::string& path, absl::StatusOr<Trace> parsed,
                               const GpumemFileInfo& info) {
  if (!IsRingSegment(info)) return parsed;
  const std::string folder = Folder(path);
  const std::string base = HeaderValue(info, "ring_base");
  const std::string ring_id = HeaderValue(info, "ring_id");
  const std::uint64_t k = HeaderNumber(info, "ring_segment");
  std::map<std::uint64_t, RingSegment> kept;
  std::vector<std::string> notes;
  if (parsed.ok()) {
    kept.emplace(k, RingSegment{*std::move(parsed), info});
  } else {
    // The newest segment of a run killed as it opened holds no event yet.
    notes.push_back(absl::StrCat(path, " left out: ", parsed.status().message()));
  }
  std::string note;
  for (std::uint64_t j = k; j-- > 0;) {
    std::optional<RingSegment> s = LoadSegment(folder, base, ring_id, j, &note);
    if (!s) break;
    kept.emplace(j, *std::move(s));
  }
  if (!note.empty()) notes.push_back(std::exchange(note, ""));
  // Past the newest the link names: the segment opened ahead, empty unless the run was
  // killed as it took over; an empty one is no news.
  for (std::uint64_t j = k + 1;; ++j) {
    std::optional<RingSegment> s = LoadSegment(folder, base, ring_id, j, &note);
    if (!s) break;
    kept.emplace(j, *std::move(s));
  }
  if (kept.empty()) return parsed.status();

  auto oldest = kept.begin();
  const std::uint64_t checkpoint_events = oldest->second.info.checkpoint_events;
  if (oldest->first > 0 && oldest->second.info.checkpoint_chunks == 0) {
    notes.push_back(absl::StrCat("segment ", oldest->first, " has no checkpoint (the run was "
                                 "killed before it was written): blocks live at its start "
                                 "are unknown"));
  }
  Trace out = std::move(oldest->second.trace);
  out.source = path;
  FrameTable table(&out);
  for (auto it = std::next(oldest); it != kept.end(); ++it) {
    Append(std::move(it->second), &table, &out);
  }
  SortByTime(&out.events);
  SortByTime(&out.annotations);
  SortByTime(&out.capacity_changes);
  SortByTime(&out.failed_allocations);
  out.ring = Window(out, kept, checkpoint_events, HeaderNumber(info, "ring_max_bytes"));
  for (std::string& n : notes) out.warnings.push_back(std::move(n));
  out.warnings.insert(out.warnings.begin(), out.ring->summary);
  return out;
}

}  // namespace gpumem::trace
