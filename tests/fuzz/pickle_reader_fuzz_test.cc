// Replays the fuzz target over a fixed corpus in the normal build (gcc, so no libFuzzer):
// small real snapshot pickles (ours and Python's), every truncation of one, and 3,000
// seeded random mutations.
// run.sh runs the same target under libFuzzer with clang.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "tools/trace/load.h"
#include "tools/trace/snapshot_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace gpumem::trace {
namespace {

int FuzzOne(const std::string& input) {
  return LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
}

// The start of a real snapshot (leaky_mlp: its first 60 events and 4 segments), exported:
// a few kB holding every kind of value and memo reference the real files use.
std::string SmallRealSnapshot() {
  auto t = LoadTrace(std::string(GPUMEM_TEST_DATA) + "/leaky_mlp.pickle.xz");
  if (!t.ok()) return "";
  t->events.resize(60);
  t->segments.resize(4);
  t->annotations.resize(4);
  auto written = WriteSnapshotPickle(*t);
  return written.ok() ? *written : "";
}

std::string Mutate(std::string s, std::mt19937_64& rng) {
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % (n ? n : 1)); };
  const int edits = 1 + static_cast<int>(pick(4));
  for (int i = 0; i < edits && !s.empty(); ++i) {
    switch (pick(5)) {
      case 0: s[pick(s.size())] = static_cast<char>(rng()); break;               // overwrite
      case 1: s[pick(s.size())] ^= static_cast<char>(1 << pick(8)); break;       // bit flip
      case 2: s.insert(pick(s.size()), 1, static_cast<char>(rng())); break;      // insert
      case 3: s.erase(pick(s.size()), 1 + pick(8)); break;                       // delete
      case 4: {                                                                  // duplicate a run
        std::size_t at = pick(s.size());
        s.insert(pick(s.size()), s.substr(at, 1 + pick(16)));
        break;
      }
    }
  }
  return s;
}

TEST(PickleReaderFuzzTest, SeedCorpusTruncationsAndMutations) {
  const std::string seed = SmallRealSnapshot();
  ASSERT_GT(seed.size(), 1000u);
  std::vector<std::string> corpus = {
      seed,
      "",
      absl::HexStringToBytes("80049512000000000000005d94287d948c016b948c017694736801652e"),
      absl::HexStringToBytes("80049524000000000000007d94288c0d6465766963655f747261636573947d948c087365676d656e7473945d94752e"),
  };
  // run.sh's seeds (the head of a real snapshot as Python pickles it, protocols 2 and 4)
  // and the inputs libFuzzer once failed on (regression_*).
  std::size_t files = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(GPUMEM_TEST_DATA) + "/../fuzz/corpus")) {
    std::ifstream in(entry.path(), std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    ASSERT_FALSE(corpus.back().empty()) << entry.path();
    ++files;
  }
  ASSERT_GE(files, 3u);
  for (const std::string& s : corpus) EXPECT_EQ(FuzzOne(s), 0);
  for (std::size_t cut = 0; cut < seed.size(); ++cut) FuzzOne(seed.substr(0, cut));
  std::mt19937_64 rng(20261123);
  for (int i = 0; i < 3000; ++i) FuzzOne(Mutate(corpus[i % 2 == 0 ? 0 : corpus.size() - 1], rng));
}

}  // namespace
}  // namespace gpumem::trace
