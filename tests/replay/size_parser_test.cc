#include "tools/replay/size_parser.h"

#include "gtest/gtest.h"

namespace gpumem::replay {
namespace {

std::uint64_t Parse(const char* text) {
  absl::StatusOr<std::uint64_t> v = ParseSize(text);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  return v.value_or(0);
}

TEST(ParseSizeTest, PlainBytes) {
  EXPECT_EQ(Parse("0"), 0u);
  EXPECT_EQ(Parse("17179869184"), 17179869184u);
  EXPECT_EQ(Parse("512B"), 512u);
  EXPECT_EQ(Parse("18446744073709551615"), 18446744073709551615u);
}

TEST(ParseSizeTest, DecimalUnitsArePowersOf1000) {
  EXPECT_EQ(Parse("17.3GB"), 17'300'000'000u);  // exactly, not a double's neighbour
  EXPECT_EQ(Parse("1.5TB"), 1'500'000'000'000u);
  EXPECT_EQ(Parse("64K"), 64'000u);
  EXPECT_EQ(Parse("2kB"), 2'000u);
  EXPECT_EQ(Parse("3M"), 3'000'000u);
  EXPECT_EQ(Parse("0.1PB"), 100'000'000'000'000u);
}

TEST(ParseSizeTest, BinaryUnitsArePowersOf1024) {
  EXPECT_EQ(Parse("16GiB"), 16ull << 30);
  EXPECT_EQ(Parse("512MiB"), 512ull << 20);
  EXPECT_EQ(Parse("1KiB"), 1024u);
  EXPECT_EQ(Parse("1.5GiB"), 3ull << 29);
  EXPECT_EQ(Parse("2TiB"), 2ull << 40);
}

TEST(ParseSizeTest, CaseAndSpacesDoNotMatter) {
  EXPECT_EQ(Parse("16gib"), 16ull << 30);
  EXPECT_EQ(Parse(" 16 GiB "), 16ull << 30);
  EXPECT_EQ(Parse("17.3gb"), 17'300'000'000u);
}

TEST(ParseSizeTest, FractionsOfAByteRoundDown) {
  EXPECT_EQ(Parse("1.0001KiB"), 1024u);  // 1024.1024 bytes
  EXPECT_EQ(Parse("0.5"), 0u);
}

TEST(ParseSizeTest, RejectsWhatIsNotASize) {
  for (const char* bad : {"", " ", "GB", "-1", "-1GB", "1.2.3GB", "12XB", "1e9", "16 GiB x",
                          "0x10", ".", "18446744073709551616", "17179869184GiB", "99999PB"}) {
    absl::StatusOr<std::uint64_t> v = ParseSize(bad);
    EXPECT_FALSE(v.ok()) << "'" << bad << "' parsed as " << v.value_or(0);
    if (!v.ok()) {
      EXPECT_NE(v.status().message().find("bad size"), absl::string_view::npos);
    }
  }
}

}  // namespace
}  // namespace gpumem::replay
