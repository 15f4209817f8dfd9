// libFuzzer target for the snapshot pickle path: pickle bytes -> value tree -> Trace ->
// exported pickle -> Trace again. Any input may be refused; none may crash, hang or leak,
// and whatever is accepted must survive its own export.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tools/trace/pickle_reader.h"
#include "tools/trace/snapshot_reader.h"
#include "tools/trace/snapshot_writer.h"

namespace {

std::size_t BlockEvents(const gpumem::trace::Trace& t) {
  std::size_t n = 0;
  for (const auto& e : t.events) {
    n += e.action != gpumem::trace::Action::kStep && e.action != gpumem::trace::Action::kAnnotate;
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string name = "fuzz.pkl";
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto tree = gpumem::trace::ReadPickle(bytes, name);
  if (!tree.ok()) return 0;
  auto trace = gpumem::trace::SnapshotToTrace(*tree, name);
  if (!trace.ok()) return 0;
  auto written = gpumem::trace::WriteSnapshotPickle(*trace);
  if (!written.ok()) __builtin_trap();  // the reader produced something the writer refuses
  auto back = gpumem::trace::ParseSnapshotPickle(*written, "export.pkl");
  if (!back.ok()) __builtin_trap();  // our own export does not read back
  // The export keeps every block and segment event (steps and annotations travel apart),
  // and the prelude the first read synthesized needs no second repair.
  if (BlockEvents(*back) != BlockEvents(*trace)) __builtin_trap();
  return 0;
}
