// The readers' limits (docs/reliability.md, Reading hostile input): decompressed size,
// line length, binary data and a cut last line in .tsv, pickle nesting, sizes no device
// has. Each is an error naming the input (or, for a cut, a stated loss), never an abort.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "tools/trace/decompress.h"
#include "tools/trace/input_limit.h"
#include "tools/trace/pickle_reader.h"
#include "tools/trace/plausible_sizes.h"
#include "tools/trace/tsv_reader.h"

namespace gpumem::trace {
namespace {

// A gzip member (zlib's deflate with the gzip wrapper: windowBits 15 + 16).
std::string Gzip(const std::string& text) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Reads everything; the error, or "" when it all came out.
std::string DrainError(DecompressingReader& reader) {
  while (true) {
    absl::StatusOr<absl::string_view> piece = reader.Next();
    if (!piece.ok()) return std::string(piece.status().message());
    if (piece->empty()) return "";
  }
}

TEST(InputLimitTest, ABombStopsAtTheLimit) {
  const std::string bomb = Gzip(std::string(32 << 20, '\0'));  // 32 MiB in ~32 kB
  auto reader = DecompressingReader::FromBytes(bomb, "bomb.gz");
  reader->set_max_bytes(1 << 20);
  EXPECT_EQ(DrainError(*reader),
            "bomb.gz: more than 1 MiB of input once decompressed (gzip): refused; "
            "GPUMEM_MAX_INPUT raises the limit");
  auto under = DecompressingReader::FromBytes(bomb, "bomb.gz");
  under->set_max_bytes(32 << 20);
  EXPECT_EQ(DrainError(*under), "");  // exactly the limit is allowed
}

TEST(InputLimitTest, TheVariableSetsTheLimit) {
  setenv(kMaxInputVariable, "16GiB", 1);
  EXPECT_EQ(*MaxInputBytes(), std::uint64_t{16} << 30);
  setenv(kMaxInputVariable, "512M", 1);
  EXPECT_EQ(*MaxInputBytes(), std::uint64_t{512} << 20);
  setenv(kMaxInputVariable, "12345", 1);
  EXPECT_EQ(*MaxInputBytes(), 12345u);
  for (const char* bad : {"lots", "0", "99999999999T", "-1G"}) {
    setenv(kMaxInputVariable, bad, 1);
    EXPECT_FALSE(MaxInputBytes().ok()) << bad;
  }
  unsetenv(kMaxInputVariable);
  EXPECT_EQ(*MaxInputBytes(), kDefaultMaxInputBytes);
}

TEST(TsvLimitsTest, ALastLineWithoutNewlineIsACut) {
  auto t = ParseTsvTrace("0\talloc\t4096\t50331648\t0\t1\t0\n1\talloc\t8192\t50", "t.tsv");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->events.size(), 1u);  // 50331648 cut to 50 is not read as 50
  ASSERT_TRUE(t->loss.has_value());
  EXPECT_EQ(t->loss->events_kept, 1u);
  EXPECT_EQ(t->loss->bytes_lost, 15u);  // "1\talloc\t8192\t50"
  EXPECT_EQ(t->warnings.front(), t->loss->summary);
  EXPECT_NE(t->loss->summary.find("t.tsv: the file ends inside line 2 (no newline after it)"),
            std::string::npos) << t->loss->summary;
  EXPECT_FALSE(ParseTsvTrace("0\talloc\t4096\t512\t0\t1\t0\n", "t.tsv")->loss.has_value());
}

TEST(TsvLimitsTest, BinaryDataIsNotATsv) {
  auto t = ParseTsvTrace(std::string("0\talloc\t4096\t512\t0\t1\t0\n\x01\x02\0\x03\n", 28), "b.tsv");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "b.tsv: line 2: binary data at byte 1: not a .tsv trace (nor a gpumem trace or "
            "snapshot pickle)");
}

TEST(TsvLimitsTest, ALineOverAMebibyteIsRefusedWhileStreaming) {
  // Pieces of 64 kB (gzip, in memory): the line is refused as it grows, not once whole.
  const std::string text = "0\talloc\t4096\t512\t0\t1\t0\n" + std::string(3 << 20, 'x') + "\n";
  auto reader = DecompressingReader::FromBytes(Gzip(text), "l.tsv.gz");
  auto t = ReadTsvTrace(*reader);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "l.tsv.gz: line 2 is longer than 1048576 bytes: not a .tsv trace");
}

// A pickle of `depth` lists, each inside the next, under protocol 2.
std::string NestedLists(int depth) {
  std::string p = "\x80\x02";
  for (int i = 0; i < depth; ++i) p += "]";                 // EMPTY_LIST, pushed
  for (int i = 1; i < depth; ++i) p += "a";                 // APPEND: each into the one below
  return p + ".";
}

TEST(PickleLimitsTest, NestingIsBounded) {
  EXPECT_TRUE(ReadPickle(NestedLists(100), "n.pkl").ok());
  auto deep = ReadPickle(NestedLists(101), "n.pkl");
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("containers nested deeper than 100 levels"),
            std::string::npos) << deep.status();
  // A million levels cost no recursion.
  EXPECT_FALSE(ReadPickle(NestedLists(1'000'000), "n.pkl").ok());
}

TEST(PickleLimitsTest, NestingThroughTheMemoIsCounted) {
  // l0 = []; l1 = []; l0.append(l1); l1.append([]); (l0, l1): built top-down through the
  // memo, so no container's depth is known when it is made: 4 levels, tuple to [].
  const std::string p = std::string("\x80\x02]q\x00]q\x01" "a" "h\x01" "]a\x86.", 15);
  PickleLimits limits;
  limits.max_depth = 3;
  auto deep = ReadPickle(p, "m.pkl", limits);
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(deep.status().message().find("nested deeper than 3 levels"), std::string::npos) << deep.status();
  limits.max_depth = 4;
  EXPECT_TRUE(ReadPickle(p, "m.pkl", limits).ok());
}

Trace OneAlloc(std::uint64_t addr, std::uint64_t size) {
  Trace t;
  t.source = "s.tsv";
  Event e;
  e.addr = addr;
  e.size = size;
  t.events.push_back(e);
  return t;
}

TEST(PlausibleSizesTest, SizesNoDeviceHasAreRefused) {
  EXPECT_TRUE(CheckPlausibleSizes(OneAlloc(4096, kMaxDeviceBytes)).ok());
  absl::Status huge = CheckPlausibleSizes(OneAlloc(4096, std::uint64_t{1} << 63));
  EXPECT_NE(huge.message().find("s.tsv: event 0 (alloc at 0x1000): a size larger than any device"),
            std::string::npos) << huge;
  EXPECT_FALSE(CheckPlausibleSizes(OneAlloc(~std::uint64_t{0} - 10, 4096)).ok());
  Trace many = OneAlloc(0, kMaxDeviceBytes);
  for (int i = 0; i < 4096; ++i) many.events.push_back(many.events.front());
  absl::Status sum = CheckPlausibleSizes(many);
  EXPECT_NE(sum.message().find("add up to more than 2^62 bytes"), std::string::npos) << sum;
  many.events.pop_back();
  EXPECT_TRUE(CheckPlausibleSizes(many).ok());  // exactly 2^62
}

}  // namespace
}  // namespace gpumem::trace
