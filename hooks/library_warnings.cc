#include "hooks/library_warnings.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "profiler/live_blocks.h"
#include "tools/report/verdict_rules.h"

namespace gpumem::hooks {
namespace {

int DeviceOfKey(std::uint64_t key) { return static_cast<int>(key >> 32); }

report::OutsideLibrary LibraryOfKey(std::uint64_t key) {
  return static_cast<report::OutsideLibrary>(key & 0xFFFFFFFFu);
}

// "NCCL's memory for train.py:9 main, outside the allocator,".
std::string Holder(const std::string& site, report::OutsideLibrary library) {
  const std::string name = library == report::OutsideLibrary::kOther && site.empty()
                               ? std::string("this process's other libraries' memory")
                               : report::OutsideHolderName(library, site);
  return absl::StrCat(name, ", outside the allocator,");
}

std::string WarningLine(const LeakWarning& w, std::uint64_t step, std::size_t steps,
                        const std::string& holder) {
  const std::string projection =
      w.oom_step ? absl::StrCat("at this rate device ", DeviceOfKey(w.key),
                                " has no free memory left at step ", *w.oom_step)
                 : std::string("the device's free memory unknown to project when it fills");
  return absl::StrCat("gpumem: leak warning at step ", step, ": ", holder,
                      GrowthPhrase(w, steps, "step"),
                      report::Bytes(w.bytes_per_step), "/step (held ",
                      report::Bytes(static_cast<double>(w.live)), "); ", projection, "\n");
}

std::string WithdrawalLine(const LeakWarning& w, std::uint64_t step, std::size_t stopped,
                           const std::string& holder) {
  return absl::StrCat("gpumem: leak warning withdrawn at step ", step, ": ", holder,
                      StoppedPhrase(w, stopped, "step", "held"));
}

}  // namespace

std::uint64_t LibraryKey(int device, report::OutsideLibrary library) {
  return LiveBlocks::Key(device, static_cast<std::uint32_t>(library));
}

std::string LibraryWarnings::Check(
    std::uint64_t step, const SiteHistory& history, const std::optional<DriverMemory>& driver,
    absl::FunctionRef<std::string(int, report::OutsideLibrary)> site_of) {
  absl::flat_hash_map<std::int32_t, LeakWarner::DeviceFigures> devices;
  if (driver) devices[driver->device] = {driver->total, driver->used()};
  std::string lines;
  for (const LeakWarning& w : warner_.Check(step, history, devices)) {
    const std::string holder = Holder(site_of(DeviceOfKey(w.key), LibraryOfKey(w.key)),
                                      LibraryOfKey(w.key));
    absl::StrAppend(&lines, w.withdrawn
                                ? WithdrawalLine(w, step, warner_.stopped_steps(), holder)
                                : WarningLine(w, step, steps_, holder));
  }
  return lines;
}

}  // namespace gpumem::hooks
