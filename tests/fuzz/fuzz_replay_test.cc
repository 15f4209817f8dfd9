// Replays a fuzz target over its committed corpus in the normal build (gcc has no
// libFuzzer): every seed, 64 cuts of each, and 300 seeded mutations (bit flips, bytes
// overwritten, runs cut out or repeated) per seed. A crash, a sanitizer report or a trap
// in the target fails the test. FUZZ_CORPUS names the folder (compile definition).
// tests/fuzz/run.sh fuzzes the same targets with libFuzzer.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

int FuzzOne(const std::string& input) {
  return LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
}

std::string Mutate(std::string s, std::mt19937_64& rng) {
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % (n ? n : 1)); };
  const int edits = 1 + static_cast<int>(pick(3));
  for (int i = 0; i < edits && !s.empty(); ++i) {
    switch (pick(4)) {
      case 0: s[pick(s.size())] ^= static_cast<char>(1 << pick(8)); break;
      case 1: s[pick(s.size())] = static_cast<char>(rng()); break;
      case 2: s.erase(pick(s.size()), 1 + pick(32)); break;
      case 3: {
        const std::size_t at = pick(s.size());
        s.insert(pick(s.size()), s.substr(at, 1 + pick(64)));
        break;
      }
    }
  }
  return s;
}

std::vector<std::string> Corpus() {
  std::vector<std::string> seeds;
  for (const auto& entry : std::filesystem::directory_iterator(FUZZ_CORPUS)) {
    std::ifstream in(entry.path(), std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return seeds;
}

TEST(FuzzReplayTest, SeedsCutsAndMutations) {
  const std::vector<std::string> seeds = Corpus();
  ASSERT_GE(seeds.size(), 2u) << FUZZ_CORPUS;
  std::mt19937_64 rng(20261125);
  for (const std::string& seed : seeds) {
    ASSERT_FALSE(seed.empty());
    EXPECT_EQ(FuzzOne(seed), 0);
    for (std::size_t k = 0; k < 64; ++k) FuzzOne(seed.substr(0, seed.size() * k / 64));
    for (int i = 0; i < 300; ++i) FuzzOne(Mutate(seed, rng));
  }
}

}  // namespace
