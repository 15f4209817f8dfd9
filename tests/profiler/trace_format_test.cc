// The byte-level building blocks of the trace format: varints, zigzag, chunk framing.
#include "profiler/trace_format.h"

#include <gtest/gtest.h>

#include <limits>

#include "profiler/journal_format.h"

namespace gpumem::format {
namespace {

TEST(VarintTest, RoundTripsEdgeValues) {
  const std::uint64_t values[] = {0, 1, 127, 128, 16383, 16384, 0xffffffffull,
                                  std::numeric_limits<std::uint64_t>::max()};
  std::string buf;
  for (std::uint64_t v : values) PutVarint(&buf, v);
  ByteReader r(buf);
  for (std::uint64_t v : values) {
    std::uint64_t got;
    ASSERT_TRUE(r.GetVarint(&got));
    EXPECT_EQ(got, v);
  }
  EXPECT_TRUE(r.done());
}

TEST(VarintTest, SizesFollowSevenBitGroups) {
  std::string buf;
  PutVarint(&buf, 127);
  EXPECT_EQ(buf.size(), 1u);
  buf.clear();
  PutVarint(&buf, 128);
  EXPECT_EQ(buf.size(), 2u);
  buf.clear();
  PutVarint(&buf, std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(buf.size(), 10u);
}

TEST(VarintTest, RejectsTruncatedAndOverlongInput) {
  std::string truncated = "\x80\x80";
  std::uint64_t v;
  EXPECT_FALSE(ByteReader(truncated).GetVarint(&v));
  std::string overlong(11, '\x80');
  EXPECT_FALSE(ByteReader(overlong).GetVarint(&v));
  std::string s;
  PutVarint(&s, 1000);  // a string claiming 1000 bytes with none behind it
  std::string out;
  EXPECT_FALSE(ByteReader(s).GetString(&out));
}

TEST(ZigZagTest, SmallMagnitudesStaySmall) {
  EXPECT_EQ(ZigZag(0), 0u);
  EXPECT_EQ(ZigZag(-1), 1u);
  EXPECT_EQ(ZigZag(1), 2u);
  EXPECT_EQ(ZigZag(-2), 3u);
  for (std::int64_t v : {std::numeric_limits<std::int64_t>::min(), std::int64_t{-12345},
                         std::int64_t{987654321}, std::numeric_limits<std::int64_t>::max()}) {
    EXPECT_EQ(UnZigZag(ZigZag(v)), v);
  }
}

TEST(ChunkTest, CompressibleAndIncompressiblePayloadsRoundTrip) {
  std::string compressible(10000, 'a');
  std::string random;
  std::uint32_t x = 12345;
  for (int i = 0; i < 1000; ++i) {
    x = x * 1664525 + 1013904223;
    random.push_back(static_cast<char>(x >> 24));
  }
  for (const std::string& payload : {compressible, random, std::string("tiny")}) {
    std::string chunk;
    AppendChunk(&chunk, ChunkKind::kRecords, 7, payload);
    const auto* p = reinterpret_cast<const unsigned char*>(chunk.data());
    std::optional<ChunkHeader> h = ParseChunkHeader(p);
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->seq, 7u);
    EXPECT_EQ(h->raw_len, payload.size());
    EXPECT_EQ(chunk.size(), kChunkHeaderSize + h->stored_len);
    EXPECT_TRUE(ChunkChecksumOk(p, *h));
    std::optional<std::string> decoded = DecodePayload(p + kChunkHeaderSize, *h);
    ASSERT_TRUE(decoded.has_value());
    EXPECT_EQ(*decoded, payload);
  }
  std::string chunk;
  AppendChunk(&chunk, ChunkKind::kRecords, 0, compressible);
  EXPECT_LT(chunk.size(), compressible.size() / 10) << "zstd should shrink a run of 'a'";
}

TEST(ChunkTest, EveryFlippedByteIsDetected) {
  std::string payload;
  for (int i = 0; i < 300; ++i) PutVarint(&payload, i * 7919);
  std::string chunk;
  AppendChunk(&chunk, ChunkKind::kRecords, 3, payload);
  for (std::size_t i = 0; i < chunk.size(); ++i) {
    std::string bad = chunk;
    bad[i] = static_cast<char>(bad[i] ^ 0x20);
    const auto* p = reinterpret_cast<const unsigned char*>(bad.data());
    std::optional<ChunkHeader> h = ParseChunkHeader(p);
    const bool accepted = h.has_value() && h->stored_len + kChunkHeaderSize <= bad.size() &&
                          ChunkChecksumOk(p, *h);
    EXPECT_FALSE(accepted) << "flip at byte " << i << " went unnoticed";
  }
}

TEST(ChunkTest, HeaderBoundsAreEnforced) {
  std::string chunk;
  AppendChunk(&chunk, ChunkKind::kRecords, 0, "hello");
  std::string bad = chunk;
  bad[16] = 9;  // unknown kind
  EXPECT_FALSE(ParseChunkHeader(reinterpret_cast<const unsigned char*>(bad.data())));
  bad = chunk;
  bad[11] = '\x7f';  // stored_len far past the limit
  EXPECT_FALSE(ParseChunkHeader(reinterpret_cast<const unsigned char*>(bad.data())));
}

TEST(FilePrefixTest, StartsWithMagicAndVersion) {
  std::string prefix = FilePrefix();
  ASSERT_EQ(prefix.size(), kPrefixSize);
  EXPECT_TRUE(HasMagic(prefix));
  EXPECT_EQ(GetU32(reinterpret_cast<const unsigned char*>(prefix.data()) + 8), kVersion);
  EXPECT_FALSE(HasMagic("\x80\x04\x95 a pickle"));
}


RawRecord ForwardAlloc(std::uint64_t seq, std::uint32_t thread, std::uint32_t node_frame) {
  RawRecord r;
  r.type = RecordType::kAlloc;
  r.time_ns = 123456789;
  r.addr = 0x7f0012340000;
  r.size = 1 << 20;
  r.stream = 7;
  r.stack_id = 42;
  r.thread = 31337;
  r.device = 1;
  r.has_autograd = true;
  r.autograd_seq = seq;
  r.autograd_thread = thread;
  r.autograd_node_frame = node_frame;
  return r;
}

std::optional<RawRecord> RoundTrip(const RawRecord& in, std::uint64_t index) {
  JournalRecord slot{};
  FillJournalRecord(in, index, &slot);
  slot.commit = index + 1;
  return ReadJournalRecord(reinterpret_cast<const unsigned char*>(&slot), index);
}

TEST(JournalFormatTest, AForwardLinkRidesInItsAllocationsSlot) {
  const RawRecord in = ForwardAlloc((std::uint64_t{1} << 48) - 1, 65535, 0);
  ASSERT_TRUE(LinkFitsInSlot(in));
  const std::optional<RawRecord> out = RoundTrip(in, 9);
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(out->has_autograd);
  EXPECT_EQ(out->autograd_seq, in.autograd_seq);
  EXPECT_EQ(out->autograd_thread, 65535u);
  EXPECT_EQ(out->autograd_node_frame, 0u);
  EXPECT_FALSE(out->has_extra);
  EXPECT_EQ(out->extra, 0u);
  EXPECT_EQ(out->addr, in.addr);
  EXPECT_EQ(out->size, in.size);
  EXPECT_EQ(out->stack_id, in.stack_id);
  EXPECT_EQ(out->thread, in.thread);
  EXPECT_EQ(out->device, in.device);
}

TEST(JournalFormatTest, LinksThatDoNotFitTakeASlotOfTheirOwn) {
  EXPECT_FALSE(LinkFitsInSlot(ForwardAlloc(5, 1, /*node_frame=*/9)));  // backward
  EXPECT_FALSE(LinkFitsInSlot(ForwardAlloc(std::uint64_t{1} << 48, 1, 0)));
  EXPECT_FALSE(LinkFitsInSlot(ForwardAlloc(5, 1u << 16, 0)));
  RawRecord no_link = ForwardAlloc(5, 1, 0);
  no_link.has_autograd = false;
  EXPECT_FALSE(LinkFitsInSlot(no_link));
  // Such an allocation's own slot carries no link: the link slot before it does.
  const std::optional<RawRecord> out = RoundTrip(ForwardAlloc(5, 1, 9), 3);
  ASSERT_TRUE(out.has_value());
  EXPECT_FALSE(out->has_autograd);
  const RawRecord link = JournalLinkOf(ForwardAlloc(5, 1, 9));
  const std::optional<RawRecord> link_out = RoundTrip(link, 2);
  ASSERT_TRUE(link_out.has_value());
  RawRecord attached = *out;
  AttachJournalLink(*link_out, &attached);
  EXPECT_EQ(attached.autograd_seq, 5u);
  EXPECT_EQ(attached.autograd_node_frame, 9u);
}

// The link flag is valid only on an allocation and never with an extra word: a slot that
// says otherwise is damaged, even when its check matches.
TEST(JournalFormatTest, ALinkFlagWhereNoneBelongsIsDamage) {
  for (const std::uint8_t flags : {std::uint8_t{kJournalFlagForwardLink | kJournalFlagExtra},
                                   std::uint8_t{kJournalFlagForwardLink}}) {
    RawRecord in = ForwardAlloc(5, 1, 0);
    in.has_autograd = false;
    if (flags == kJournalFlagForwardLink) in.type = RecordType::kFree;
    JournalRecord slot{};
    FillJournalRecord(in, 4, &slot);
    slot.flags = flags;
    std::uint64_t w[7];
    JournalCheckWords(slot, w);
    slot.check = JournalCheck(w, 4);
    slot.commit = 5;
    EXPECT_FALSE(ReadJournalRecord(reinterpret_cast<const unsigned char*>(&slot), 4))
        << int{flags};
  }
}

}  // namespace
}  // namespace gpumem::format
