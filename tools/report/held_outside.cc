#include "tools/report/held_outside.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/report/outside_library.h"

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
// other than the allocator, NCCL, cuBLAS and cuDNN held 1.00 GiB".
std::string Holders(const OutsideMoment& m) {
  std::vector<std::string> parts;
  if (const std::uint64_t others = OtherProcessesBytes(m); others > 0) {
    parts.push_back(absl::StrCat("other processes held ", Bytes(static_cast<double>(others)),
                                 " (", ProcessesText(m.processes->note.processes.others), ")"));
  }
  if (const std::uint64_t library = UnusualLibraryBytes(m); library > 0) {
    parts.push_back(absl::StrCat("libraries of this process other than the allocator, NCCL, "
                                 "cuBLAS and cuDNN held ",
                                 Bytes(static_cast<double>(library))));
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

void ExplainHeldOutside(const OutsideMoment& at_oom, OomExplanation* x) {
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
  x->evidence = absl::StrCat(RoomText(f), ": ", Holders(at_oom),
                             ". Without that memory the request would have fit.");
  x->fix = OomFix(OomClass::kHeldOutside);
}

}  // namespace gpumem::report
