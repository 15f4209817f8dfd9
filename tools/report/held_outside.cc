#include "tools/report/held_outside.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/report/outside_changes.h"
#include "tools/report/outside_library.h"
#include "tools/report/sites.h"

namespace gpumem::report {
namespace {

std::uint64_t OtherProcessesBytes(const OutsideMoment& m) {
  if (!m.processes || !m.processes->at_moment) return 0;
  return m.processes->note.processes.others_bytes();
}

std::uint64_t UnusualLibraryBytes(const OutsideMoment& m) {
  return m.by_library[static_cast<std::size_t>(OutsideLibrary::kOther)];
}

// "other processes held 138.85 GiB (pid 2848 138.85 GiB), and libraries of this process
// other than the allocator, NCCL, cuBLAS and cuDNN held 1.00 GiB, most of it from f.py:3 g".
std::string Holders(const OutsideMoment& m, const std::string& library_site) {
  std::vector<std::string> parts;
  if (const std::uint64_t others = OtherProcessesBytes(m); others > 0) {
    parts.push_back(absl::StrCat("other processes held ", Bytes(static_cast<double>(others)),
                                 " (", ProcessesText(m.processes->note.processes.others), ")"));
  }
  if (const std::uint64_t library = UnusualLibraryBytes(m); library > 0) {
    parts.push_back(absl::StrCat("libraries of this process other than the allocator, NCCL, "
                                 "cuBLAS and cuDNN held ",
                                 Bytes(static_cast<double>(library)),
                                 library_site.empty() ? std::string()
                                                      : ", most of it from " + library_site));
  }
  return absl::StrJoin(parts, ", and ");
}

// "the request of 8.00 MiB was under the cap of 4.00 GiB (allocated 97.03 MiB), but the
// driver had 469.12 MiB free (gpumem keeps 512.00 MiB free for other libraries)".
std::string RoomText(const OomFigures& f) {
  const std::string budget =
      f.capacity_known ? absl::StrCat("was under the cap of ", Bytes(f.capacity), " (allocated ",
                                      Bytes(f.allocated), ")")
                       : std::string("needed memory from the driver");
  const std::string headroom =
      f.headroom == 0
          ? std::string()
          : absl::StrCat(" (gpumem keeps ", Bytes(f.headroom), " free for other libraries)");
  return absl::StrCat("the request of ", Bytes(f.request), " ", budget, ", but the driver had ",
                      Bytes(*f.device_free), " free", headroom);
}

}  // namespace

std::string UnusualLibrarySite(const trace::Trace& main, const trace::Trace& cupti, int device,
                               std::int64_t time_us) {
  const std::int64_t until = time_us - CuptiShiftUs(main, cupti);
  absl::flat_hash_map<std::uint64_t, const trace::Event*> live;  // by address
  for (const trace::Event& e : cupti.events) {
    if (e.time_us > until) continue;
    if (e.device != device) continue;
    if (e.action == trace::Action::kSegmentFree) live.erase(e.addr);
    if (e.action != trace::Action::kSegmentAlloc || !IsDriverCall(cupti, e.stack_id) ||
        LibraryOfStack(cupti, e.stack_id) != OutsideLibrary::kOther) {
      continue;
    }
    live[e.addr] = &e;
  }
  if (live.empty()) return "";
  const SiteTable sites(cupti);
  absl::flat_hash_map<std::uint32_t, std::uint64_t> by_site;
  for (const auto& [addr, e] : live) by_site[sites.site_of_stack(e->stack_id)] += e->size;
  const auto most = std::max_element(by_site.begin(), by_site.end(), [](const auto& a,
                                                                        const auto& b) {
    return a.second < b.second;
  });
  return most->first == 0 ? "" : sites.name(most->first);
}

void ExplainHeldOutside(const OutsideMoment& at_oom, const std::string& library_site,
                        OomExplanation* x) {
  if (x->cls == OomClass::kLeak) return;
  OomFigures f;
  f.allocated = x->at.allocated;
  f.request = x->at.request;
  f.capacity = x->capacity;
  f.capacity_known = x->capacity_known;
  if (x->at.device_free != 0) f.device_free = x->at.device_free;
  f.held_outside = OtherProcessesBytes(at_oom) + UnusualLibraryBytes(at_oom);
  f.headroom = x->at.headroom;
  if (!HeldOutsideExplains(f)) return;
  x->cls = OomClass::kHeldOutside;
  x->evidence = absl::StrCat(RoomText(f), ": ", Holders(at_oom, library_site),
                             ". Without that memory the request would have fit.");
  x->fix = OomFix(OomClass::kHeldOutside);
}

}  // namespace gpumem::report
