// `gpumem replay` as a user runs it: the built binary, its exit status, its stdout and
// its one-line errors on bad input (files made here: truncated, corrupt, malformed).
#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "allocator/policies.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpumem::replay {
namespace {

struct CliRun {
  int status = -1;
  std::string out;
  std::string err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/gpumem_replay_cli_" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

CliRun Gpumem(const std::string& args) {
  const std::string out = ::testing::TempDir() + "/gpumem_replay_cli.out";
  const std::string err = ::testing::TempDir() + "/gpumem_replay_cli.err";
  const std::string command =
      std::string(GPUMEM_BINARY) + " " + args + " >" + out + " 2>" + err;
  const int raw = std::system(command.c_str());
  CliRun r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = ReadFile(out);
  r.err = ReadFile(err);
  return r;
}

const std::string kData = GPUMEM_TEST_DATA;
const std::string kLeaky = kData + "/leaky_mlp.trace.tsv.gz";

// Bad input: status 2, and exactly one line on stderr that names the file.
void ExpectBadInput(const CliRun& r, const std::string& must_contain) {
  EXPECT_EQ(r.status, 2) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line: " << r.err;
  EXPECT_NE(r.err.find(must_contain), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(ReplayCliTest, HelpDescribesTheOptions) {
  const CliRun r = Gpumem("replay --help");
  EXPECT_EQ(r.status, 0);
  for (const char* word :
       {"--policy", "--cap", "--min-cap", "--json", "17.3GB", "16GiB", "pytorch-expandable"}) {
    EXPECT_NE(r.out.find(word), std::string::npos) << word;
  }
}

TEST(ReplayCliTest, TablePerTraceWithEveryPolicy) {
  const CliRun r = Gpumem("replay " + kLeaky);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("leaky_mlp.trace.tsv.gz"), std::string::npos);
  for (const std::string& policy : PolicyNames()) {
    EXPECT_NE(r.out.find(policy), std::string::npos) << policy;
  }
  EXPECT_NE(r.out.find("ratio"), std::string::npos);
}

TEST(ReplayCliTest, JsonIsOneObjectPerTraceAndPolicy) {
  const CliRun r = Gpumem("replay --json --policy pytorch " + kLeaky + " " + kLeaky);
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  int objects = 0;
  while (std::getline(lines, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["trace"], kLeaky);
    EXPECT_EQ(j["policy"], "pytorch");
    // PyTorch's own figure for this trace (tests/data/README.md): the emulation is exact.
    EXPECT_EQ(j["peak_reserved"], 538'968'064u);
    EXPECT_GT(j["peak_allocated"].get<std::uint64_t>(), 500'000'000u);
    EXPECT_GT(j["ratio"].get<double>(), 1.0);
    EXPECT_TRUE(j["oom"].is_null());
    ++objects;
  }
  EXPECT_EQ(objects, 2);
}

// Device calls per step: leaky_mlp's 60 steps (as `gpumem report` finds them); the sums
// agree, and the table says what the steady steps asked of the device.
TEST(ReplayCliTest, DeviceCallsPerStep) {
  const CliRun r = Gpumem("replay --json --policy gpumem " + kLeaky);
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["steps"], 60u);
  EXPECT_EQ(j["warmup_steps"], 30u);
  ASSERT_EQ(j["device_per_step"].size(), 60u);
  for (const char* key :
       {"maps", "unmaps", "synchronizes", "stream_waits", "physical_creates", "stitches"}) {
    std::uint64_t total = 0, steady = 0;
    for (std::size_t k = 0; k < 60; ++k) {
      const std::uint64_t n = j["device_per_step"][k][key].get<std::uint64_t>();
      total += n;
      if (k >= 30) steady += n;
    }
    EXPECT_EQ(j["device_total"][key].get<std::uint64_t>(), total) << key;
    EXPECT_EQ(j["device_steady"][key].get<std::uint64_t>(), steady) << key;
  }
  EXPECT_GT(j["device_total"]["maps"].get<std::uint64_t>(), 0u);

  const CliRun table = Gpumem("replay --policy gpumem " + kLeaky);
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("device calls in steps 31-60 (after warm-up): maps "),
            std::string::npos)
      << table.out;
}

// --page-size: gpumem's page in whole granules; larger pages map fewer times.
TEST(ReplayCliTest, PageSize) {
  const CliRun two = Gpumem("replay --json --policy gpumem " + kLeaky);
  const CliRun four = Gpumem("replay --json --policy gpumem --page-size 4MiB " + kLeaky);
  ASSERT_EQ(two.status, 0) << two.err;
  ASSERT_EQ(four.status, 0) << four.err;
  const auto maps = [](const CliRun& r) {
    return nlohmann::json::parse(r.out)["device_total"]["maps"].get<std::uint64_t>();
  };
  EXPECT_LT(maps(four), maps(two));
  ExpectBadInput(Gpumem("replay --page-size 4M " + kLeaky), "M alone is 10^6");
  ExpectBadInput(Gpumem("replay --page-size 3MiB " + kLeaky), "2 MiB granules");
  ExpectBadInput(Gpumem("replay --page-size 0 " + kLeaky), "--page-size");
  ExpectBadInput(Gpumem("replay --page-size big " + kLeaky), "--page-size");
}

TEST(ReplayCliTest, CapBelowThePeakReportsAnOom) {
  const CliRun r = Gpumem("replay --json --policy pytorch --cap 400MB " + kLeaky);
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j["oom"].is_object()) << r.out;
  EXPECT_LE(j["oom"]["reserved"].get<std::uint64_t>(), 400'000'000u);
  EXPECT_GT(j["oom"]["requested"].get<std::uint64_t>(), 0u);
  EXPECT_GT(j["oom"]["event_index"].get<std::uint64_t>(), 0u);
  const CliRun table = Gpumem("replay --policy pytorch --cap 400MB " + kLeaky);
  EXPECT_NE(table.out.find("at event"), std::string::npos) << table.out;
}

// A size no device has is refused when the trace is read (tools/trace/plausible_sizes.h),
// so no total can wrap.
TEST(ReplayCliTest, AbsurdSizesAreRefused) {
  const std::string path = WriteFile(
      "huge.tsv", "0\talloc\t4096\t18446744073709551615\t0\t0\t0\n");
  ExpectBadInput(Gpumem("replay --json " + path), "a size larger than any device");
}

TEST(ReplayCliTest, CapAsAFactorOfPeakAllocated) {
  const CliRun r = Gpumem("replay --json --policy pytorch --cap 1.5x " + kLeaky);
  ASSERT_EQ(r.status, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  const auto peak = j["peak_allocated"].get<std::uint64_t>();
  EXPECT_EQ(j["capacity"].get<std::uint64_t>(), static_cast<std::uint64_t>(1.5 * peak));
  EXPECT_TRUE(j["oom"].is_null());
  const CliRun tight = Gpumem("replay --json --policy pytorch --cap 1.0x " + kLeaky);
  EXPECT_TRUE(nlohmann::json::parse(tight.out)["oom"].is_object()) << tight.out;
}

TEST(ReplayCliTest, TruncatedCompressedFile) {
  const std::string whole = ReadFile(kLeaky);
  const std::string path = WriteFile("truncated.trace.tsv.gz", whole.substr(0, whole.size() / 2));
  ExpectBadInput(Gpumem("replay " + path), path);
}

TEST(ReplayCliTest, CorruptCompressedFile) {
  std::string bytes = ReadFile(kLeaky);
  for (std::size_t i = bytes.size() / 3; i < bytes.size() / 3 + 64; ++i) bytes[i] ^= 0x5a;
  const std::string path = WriteFile("corrupt.trace.tsv.gz", bytes);
  ExpectBadInput(Gpumem("replay " + path), path);
}

TEST(ReplayCliTest, TruncatedPickle) {
  const std::string whole = ReadFile(kData + "/leaky_mlp.pickle.xz");
  const std::string path = WriteFile("truncated.pickle.xz", whole.substr(0, whole.size() / 2));
  ExpectBadInput(Gpumem("replay " + path), path);
}

// A last line without its newline was cut: left out and said, not read as a smaller number.
TEST(ReplayCliTest, LineCutShortIsACut) {
  const std::string path = WriteFile("short.tsv", "0\talloc\t4096\t512\t0\t0\t0\n1\talloc\t81");
  const CliRun r = Gpumem("replay --json --policy gpumem " + path);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find(path + ": the file ends inside line 2 (no newline after it): cut there; "
                              "kept the 1 events before it"),
            std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["events"], 1) << r.out;
}

TEST(ReplayCliTest, UnknownAction) {
  const std::string path = WriteFile("action.tsv", "0\tfrobnicate\t4096\t512\t0\t0\t0\n");
  ExpectBadInput(Gpumem("replay " + path), "frobnicate");
}

// Ignored and said, in the words of `gpumem report` (tools/trace/unpaired_events.h).
TEST(ReplayCliTest, FreeOfAnAddressThatIsNotLive) {
  const std::string path = WriteFile(
      "notlive.tsv", "0\talloc\t4096\t512\t0\t0\t0\n1\tfree_completed\t8192\t512\t0\t0\t0\n");
  const CliRun r = Gpumem("replay --policy gpumem " + path);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "warning: 1 frees of blocks the trace never allocated (recording started "
                   "mid-run, or the alloc was lost); they are ignored\n");
}

TEST(ReplayCliTest, EmptyTrace) {
  const std::string path = WriteFile("empty.tsv", "# seq\taction\taddr\tsize\tstream\ttime_us\tstack\n");
  ExpectBadInput(Gpumem("replay " + path), path);
}

TEST(ReplayCliTest, MissingFile) {
  ExpectBadInput(Gpumem("replay /nonexistent/x.trace.tsv.gz"), "/nonexistent/x.trace.tsv.gz");
}

TEST(ReplayCliTest, BadCap) {
  ExpectBadInput(Gpumem("replay --cap 12XB " + kLeaky), "--cap");
  ExpectBadInput(Gpumem("replay --cap 0 " + kLeaky), "--cap");
  ExpectBadInput(Gpumem("replay --cap 0x " + kLeaky), "--cap");
  ExpectBadInput(Gpumem("replay --cap -1.5x " + kLeaky), "--cap");
  ExpectBadInput(Gpumem("replay --cap abcx " + kLeaky), "--cap");
}

TEST(ReplayCliTest, MinCapPerPolicy) {
  const CliRun r = Gpumem("replay --min-cap --json " + kLeaky);
  ASSERT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::map<std::string, std::uint64_t> min_cap;
  while (std::getline(lines, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["trace"], kLeaky);
    const auto peak = j["peak_allocated"].get<std::uint64_t>();
    const auto cap = j["min_cap"].get<std::uint64_t>();
    EXPECT_GE(cap, peak);
    EXPECT_LE(cap, std::max(peak, j["uncapped_reserved"].get<std::uint64_t>()));
    EXPECT_GT(j["replays"].get<int>(), 1);
    min_cap[j["policy"].get<std::string>()] = cap;
  }
  ASSERT_EQ(min_cap.size(), PolicyNames().size());
  EXPECT_LT(min_cap["gpumem"], min_cap["pytorch"]);
  const CliRun table = Gpumem("replay --min-cap --policy gpumem " + kLeaky);
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("smallest cap"), std::string::npos) << table.out;
  ExpectBadInput(Gpumem("replay --min-cap --cap 1G " + kLeaky), "--min-cap");
}

TEST(ReplayCliTest, UnknownPolicy) {
  ExpectBadInput(Gpumem("replay --policy tcmalloc " + kLeaky), "tcmalloc");
}

}  // namespace
}  // namespace gpumem::replay
