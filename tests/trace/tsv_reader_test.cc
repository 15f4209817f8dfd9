#include "tools/trace/tsv_reader.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include "absl/strings/str_cat.h"
#include "tools/trace/decompress.h"
#include "tools/trace/load.h"

namespace gpumem::trace {
namespace {

TEST(TsvReaderTest, ReadsEventsAndInternsStacks) {
  auto trace = ParseTsvTrace(
      "# seq\taction\taddr\tsize\tstream\ttime_us\tstack\n"
      "0\tsegment_alloc\t4096\t2097152\t0\t10\t7\n"
      "1\talloc\t4096\t512\t0\t11\t7\n"
      "2\tfree_requested\t4096\t512\t0\t12\t9\n"
      "S\t7\ta.py:3:f | b.py:10:main\n"
      "S\t9\tb.py:10:main\n",
      "t.tsv");
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->events.size(), 3u);
  EXPECT_EQ(trace->events[1].action, Action::kAlloc);
  EXPECT_EQ(trace->events[1].size, 512u);
  const auto& stack = trace->stacks[trace->events[1].stack_id];
  ASSERT_EQ(stack.size(), 2u);
  EXPECT_EQ(trace->frames[stack[0]].filename, "a.py");
  EXPECT_EQ(trace->frames[stack[0]].line, 3);
  EXPECT_EQ(trace->frames[stack[1]].function, "main");
  // b.py:10:main is stored once and shared by both stacks.
  EXPECT_EQ(trace->frames.size(), 2u);
}

// An OOM row carries the device's free bytes in its address column; the event's address
// (the headroom that refused it, in gpumem traces) is then unknown.
TEST(TsvReaderTest, AnOomRowsAddressIsTheDevicesFreeBytes) {
  auto trace = ParseTsvTrace("0\toom\t1048576\t4096\t0\t10\t0\n", "t.tsv");
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_EQ(trace->events.size(), 1u);
  EXPECT_EQ(trace->events[0].device_free, 1048576u);
  EXPECT_EQ(trace->events[0].addr, 0u);
}

TEST(TsvReaderTest, BadLinesAreNamed) {
  auto unknown = ParseTsvTrace("0\tmalloc\t1\t2\t0\t3\t0\n", "t.tsv");
  EXPECT_EQ(unknown.status().message(), "t.tsv: line 1: unknown action 'malloc'");
  auto short_line = ParseTsvTrace("0\talloc\t1\t512\n", "t.tsv");
  EXPECT_EQ(short_line.status().message(),
            "t.tsv: line 1: expected 7 tab-separated fields, found 4");
  auto number = ParseTsvTrace("0\talloc\tx\t512\t0\t3\t0\n", "t.tsv");
  EXPECT_EQ(number.status().message(), "t.tsv: line 1: a numeric field is not a number");
}

// A trace text of several MiB, so that lines straddle the reader's 1 MiB pieces.
std::string BigText() {
  std::string text = "# seq\taction\taddr\tsize\tstream\ttime_us\tstack\n";
  for (int i = 0; i < 120000; ++i) {
    absl::StrAppend(&text, i, "\t", i % 3 ? "alloc" : "free_requested", "\t", 4096 + i * 512, "\t",
                    512 + i % 7, "\t0\t", 10 * i, "\t", 1 + i % 2, "\n");
  }
  text += "S\t1\ta.py:3:f | b.py:10:main\nS\t2\tb.py:10:main";  // no final newline
  return text;
}

std::string Gzip(const std::string& text) {
  z_stream s{};
  EXPECT_EQ(deflateInit2(&s, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&s, text.size()), '\0');
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  s.avail_in = static_cast<uInt>(text.size());
  s.next_out = reinterpret_cast<Bytef*>(out.data());
  s.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&s, Z_FINISH), Z_STREAM_END);
  out.resize(s.total_out);
  deflateEnd(&s);
  return out;
}

std::string Zstd(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3));
  return out;
}

std::string Xz(const std::string& text) {
  std::string out(lzma_stream_buffer_bound(text.size()), '\0');
  std::size_t n = 0;
  EXPECT_EQ(lzma_easy_buffer_encode(1, LZMA_CHECK_CRC64, nullptr,
                                    reinterpret_cast<const uint8_t*>(text.data()), text.size(),
                                    reinterpret_cast<uint8_t*>(out.data()), &n, out.size()),
            LZMA_OK);
  out.resize(n);
  return out;
}

void ExpectSameTrace(const Trace& a, const Trace& b) {
  ASSERT_EQ(a.events.size(), b.events.size());
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    ASSERT_EQ(a.events[i].addr, b.events[i].addr) << i;
    ASSERT_EQ(a.events[i].size, b.events[i].size) << i;
    ASSERT_EQ(a.events[i].time_us, b.events[i].time_us) << i;
    ASSERT_EQ(a.stacks[a.events[i].stack_id], b.stacks[b.events[i].stack_id]) << i;
  }
  EXPECT_EQ(a.warnings, b.warnings);
}

TEST(TsvStreamTest, EveryCodecStreamsToTheSameTraceAsTheWholeText) {
  const std::string text = BigText();
  auto whole = ParseTsvTrace(text, "t.tsv");
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->events.size(), 120000u);
  for (const auto& [codec, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"none", text}, {"gzip", Gzip(text)}, {"zstd", Zstd(text)}, {"xz", Xz(text)}}) {
    SCOPED_TRACE(codec);
    auto reader = DecompressingReader::FromBytes(bytes, "t.tsv");
    EXPECT_EQ(reader->codec_name(), codec);
    std::vector<double> fractions;
    auto streamed = ReadTsvTrace(*reader, [&](double f) { fractions.push_back(f); });
    ASSERT_TRUE(streamed.ok()) << streamed.status();
    ExpectSameTrace(*whole, *streamed);
    // Progress rises, and only to 1.
    for (std::size_t i = 1; i < fractions.size(); ++i) EXPECT_GE(fractions[i], fractions[i - 1]);
    if (!fractions.empty()) {
      EXPECT_LE(fractions.back(), 1.0);
    }
  }
}

TEST(TsvStreamTest, ConcatenatedGzipMembersAreOneStream) {
  const std::string text = BigText();
  const std::size_t half = text.find('\n', text.size() / 2) + 1;
  auto reader = DecompressingReader::FromBytes(
      Gzip(text.substr(0, half)) + Gzip(text.substr(half)), "t.tsv.gz");
  auto streamed = ReadTsvTrace(*reader);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_EQ(streamed->events.size(), 120000u);
}

TEST(TsvStreamTest, TruncatedAndCorruptStreamsAreNamedErrors) {
  const std::string text = BigText();
  for (const auto& [codec, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"gzip", Gzip(text)}, {"zstd", Zstd(text)}, {"xz", Xz(text)}}) {
    SCOPED_TRACE(codec);
    auto cut = DecompressingReader::FromBytes(bytes.substr(0, bytes.size() / 2), "t.gz");
    auto truncated = ReadTsvTrace(*cut);
    ASSERT_FALSE(truncated.ok());
    EXPECT_EQ(truncated.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_TRUE(absl::StartsWith(truncated.status().message(),
                                 absl::StrCat("t.gz: ", codec, " stream is truncated at compressed byte ")))
        << truncated.status();
    std::string damaged = bytes;
    for (std::size_t i = damaged.size() / 3; i < damaged.size() / 3 + 64; ++i) damaged[i] ^= 0x5a;
    auto bad = DecompressingReader::FromBytes(damaged, "t.gz");
    auto corrupt = ReadTsvTrace(*bad);
    ASSERT_FALSE(corrupt.ok());
    EXPECT_TRUE(absl::StrContains(corrupt.status().message(), "t.gz: ")) << corrupt.status();
  }
}

TEST(TsvStreamTest, ABadLineIsNamedAcrossPieces) {
  std::string text = BigText();
  const std::size_t at = text.find("\n100000\t");
  text.insert(at + 1, "junk line\n");
  auto reader = DecompressingReader::FromBytes(Gzip(text), "t.tsv.gz");
  auto trace = ReadTsvTrace(*reader);
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().message(),
            "t.tsv.gz: line 100002: expected 7 tab-separated fields, found 1");
}

TEST(LoadTraceTest, ReadsTheRealGzippedTrace) {
  auto trace = LoadTrace(std::string(GPUMEM_TEST_DATA) + "/leaky_mlp.trace.tsv.gz");
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->events.size(), 3519u);
  EXPECT_TRUE(trace->warnings.empty());
}

TEST(LoadTraceTest, MissingFileIsAnError) {
  auto trace = LoadTrace("/nonexistent/trace.tsv");
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace gpumem::trace
