#include "tools/trace/pickle_reader.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "tools/trace/decompress.h"
#include "tools/trace/pickle_value.h"
#include "tests/trace/test_support.h"

namespace gpumem::trace {
namespace {

// pickle.dumps({'a': [1, 2**64-1, -5, True, None, 1.5, 'x', b'y', (1, 2), 300, 70000,
//                     -2**63, 2**63]}, protocol=P).hex(), from CPython 3.11.
constexpr char kProtocol3[] =
    "80037d710058010000006171015d7102284b018a09ffffffffffffffff004afbffffff884e473ff800000000"
    "0000580100000078710343017971044b014b028671054d2c014a701101008a0800000000000000808a090000"
    "0000000000800065732e";
constexpr char kProtocol4[] =
    "80049554000000000000007d948c0161945d94284b018a09ffffffffffffffff004afbffffff884e473ff800"
    "00000000008c017894430179944b014b0286944d2c014a701101008a0800000000000000808a090000000000"
    "0000800065732e";
// The same with protocol 2 spells bytes as a call to _codecs.encode (GLOBAL 'c' at byte 54).
constexpr char kProtocol2[] =
    "80027d710058010000006171015d7102284b018a09ffffffffffffffff004afbffffff884e473ff800000000"
    "00005801000000787103635f636f646563730a656e636f64650a7104580100000079710558060000006c6174"
    "696e3171068671075271084b014b028671094d2c014a701101008a0800000000000000808a09000000000000"
    "00800065732e";

// Bytes of a literal, NULs included.
template <std::size_t N>
std::string B(const char (&s)[N]) {
  return std::string(s, N - 1);
}

absl::StatusOr<PickleTree> Read(absl::string_view hex) {
  return ReadPickle(absl::HexStringToBytes(hex), "t.pkl");
}

void ExpectTheValue(const PickleTree& t) {
  ASSERT_TRUE(t.is_dict(t.root()));
  std::optional<PickleId> a = t.Find(t.root(), "a");
  ASSERT_TRUE(a.has_value());
  ASSERT_EQ(t.kind(*a), PickleKind::kList);
  absl::Span<const PickleId> v = t.items(*a);
  ASSERT_EQ(v.size(), 13u);
  EXPECT_EQ(t.as_int64(v[0]), 1);
  EXPECT_EQ(t.kind(v[1]), PickleKind::kUint);
  EXPECT_EQ(t.as_uint64(v[1]), ~std::uint64_t{0});
  EXPECT_EQ(t.as_int64(v[1]), std::nullopt);
  EXPECT_EQ(t.as_int64(v[2]), -5);
  EXPECT_EQ(t.as_uint64(v[2]), std::nullopt);
  EXPECT_EQ(t.kind(v[3]), PickleKind::kBool);
  EXPECT_TRUE(t.as_bool(v[3]));
  EXPECT_EQ(t.kind(v[4]), PickleKind::kNone);
  EXPECT_EQ(t.as_float(v[5]), 1.5);
  EXPECT_EQ(t.as_string(v[6]), "x");
  EXPECT_EQ(t.kind(v[7]), PickleKind::kBytes);
  EXPECT_EQ(t.as_string(v[7]), "y");
  ASSERT_EQ(t.kind(v[8]), PickleKind::kTuple);
  ASSERT_EQ(t.items(v[8]).size(), 2u);
  EXPECT_EQ(t.as_int64(t.items(v[8])[1]), 2);
  EXPECT_EQ(t.as_int64(v[9]), 300);
  EXPECT_EQ(t.as_int64(v[10]), 70000);
  EXPECT_EQ(t.as_int64(v[11]), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(t.as_uint64(v[12]), std::uint64_t{1} << 63);
}

TEST(PickleReaderTest, ReadsWhatPythonWrites) {
  for (const char* hex : {kProtocol3, kProtocol4}) {
    auto tree = Read(hex);
    ASSERT_TRUE(tree.ok()) << tree.status();
    ExpectTheValue(*tree);
  }
}

TEST(PickleReaderTest, RefusesCodeWithTheOpcodeAndOffset) {
  auto tree = Read(kProtocol2);
  EXPECT_EQ(tree.status().message(),
            "t.pkl: byte 54: GLOBAL: not supported (snapshots hold only plain data)");
}

TEST(PickleReaderTest, ProtocolZeroListAndText) {
  // pickle.dumps([1, 'a'], protocol=0) spells 'a' with UNICODE (unsupported); the list and
  // ints are supported: b'(lp0\nI1\na.'
  auto tree = ReadPickle("(lp0\nI1\naI01\na.", "t.pkl");
  ASSERT_TRUE(tree.ok()) << tree.status();
  ASSERT_EQ(tree->items(tree->root()).size(), 2u);
  EXPECT_EQ(tree->as_int64(tree->items(tree->root())[0]), 1);
  EXPECT_EQ(tree->kind(tree->items(tree->root())[1]), PickleKind::kBool);
}

TEST(PickleReaderTest, MemoSharesTheValue) {
  // [d, d] with d = {'k': 'v'}: the second is a BINGET of the first, the same node.
  // pickle.dumps([d, d], protocol=4)
  auto tree = Read("80049512000000000000005d94287d948c016b948c017694736801652e");
  ASSERT_TRUE(tree.ok()) << tree.status();
  absl::Span<const PickleId> items = tree->items(tree->root());
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0], items[1]);
  EXPECT_EQ(tree->as_string(*tree->Find(items[0], "k")), "v");
}

TEST(PickleReaderTest, ErrorsAreOneLineWithTheOffset) {
  struct Case {
    std::string data;
    std::string error;
  };
  const Case cases[] = {
      {"", "t.pkl: byte 0: empty file"},
      {"\x80\x04", "t.pkl: byte 2: truncated: no STOP opcode before the end"},
      {"\x80\x04J\x01\x02", "t.pkl: byte 2: BININT: truncated argument"},
      {"\x80\x04\xff.", "t.pkl: byte 2: unknown opcode 0xff"},
      {"\x80\x06N.", "t.pkl: byte 0: PROTO: unsupported protocol 6"},
      {"\x80\x04.", "t.pkl: byte 2: STOP: stack underflow"},
      {"\x80\x04h\x05.", "t.pkl: byte 2: BINGET: memo index 5 was never set"},
      {"\x80\x04Na.", "t.pkl: byte 3: APPEND: stack underflow"},
      {"\x80\x04NNa.", "t.pkl: byte 4: APPEND: target is a None, not a list"},
      {"\x80\x04}]]s.", "t.pkl: byte 5: SETITEM: unhashable dict key of type list"},
      {"\x80\x04(Nu.", "t.pkl: byte 4: SETITEMS: stack underflow: no container below the items"},
      {"\x80\x04]N(Ne.", "t.pkl: byte 6: APPENDS: target is a None, not a list"},
      {"\x80\x04}(Nu.", "t.pkl: byte 5: SETITEMS: odd number of items for a dict"},
      {"\x80\x04N(\x86.", "t.pkl: byte 4: TUPLE2: stack underflow"},
      {"\x80\x04t.", "t.pkl: byte 2: TUPLE: no MARK before it"},
      {B("\x80\x04\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01."),
       "t.pkl: byte 2: LONG1: 9-byte integer does not fit 64 bits"},
      {B("\x80\x04\x8c\x05" "ab"), "t.pkl: byte 2: SHORT_BINUNICODE: truncated argument"},
      {B("\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N."),
       "t.pkl: byte 2: FRAME: frame runs past the end of the data"},
      {"\x80\x04q\x09.", "t.pkl: byte 2: BINPUT: stack underflow"},
  };
  for (const Case& c : cases) {
    auto tree = ReadPickle(c.data, "t.pkl");
    EXPECT_EQ(tree.status().message(), c.error) << absl::BytesToHexString(c.data);
  }
}

TEST(PickleReaderTest, IntegerEdges) {
  // LONG1 of -2**63 (8 bytes), -1 (1 byte), 2**64-1 (9 bytes, zero sign byte), 0 (0 bytes).
  auto tree = ReadPickle(B("\x80\x04(\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80"
                                     "\x8a\x01\xff"
                                     "\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00"
                                     "\x8a\x00"
                                     "J\xff\xff\xff\xff"
                                     "l."),
                         "t.pkl");
  ASSERT_TRUE(tree.ok()) << tree.status();
  absl::Span<const PickleId> v = tree->items(tree->root());
  ASSERT_EQ(v.size(), 5u);
  EXPECT_EQ(tree->as_int64(v[0]), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(tree->as_int64(v[1]), -1);
  EXPECT_EQ(tree->as_uint64(v[2]), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(tree->as_int64(v[3]), 0);
  EXPECT_EQ(tree->as_int64(v[4]), -1);
  // A negative that needs 9 bytes is refused.
  auto big = ReadPickle(B("\x80\x04\x8a\x09\xff\xff\xff\xff\xff\xff\xff\x7f\xff."), "t.pkl");
  EXPECT_FALSE(big.ok());
}

TEST(PickleReaderTest, LimitsBoundNesting) {
  std::string deep = "\x80\x04";
  for (int i = 0; i < 2000; ++i) deep += "(";
  deep += "N.";
  auto marks = ReadPickle(deep, "t.pkl");
  EXPECT_EQ(marks.status().message(), "t.pkl: byte 1026: MARK: more than 1024 nested MARKs");
  std::string wide = "\x80\x04";
  for (int i = 0; i < 100; ++i) wide += "]";
  wide += ".";
  PickleLimits limits;
  limits.max_stack = 50;
  auto stack = ReadPickle(wide, "t.pkl", limits);
  EXPECT_EQ(stack.status().message(), "t.pkl: byte 52: EMPTY_LIST: more than 50 values on the stack");
}

TEST(PickleReaderTest, ScalarsHaveNoItems) {
  auto tree = ReadPickle(B("\x80\x04\x8c\x03" "abc."), "t.pkl");
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_TRUE(tree->items(tree->root()).empty());
  EXPECT_EQ(tree->Find(tree->root(), "abc"), std::nullopt);
}

// Self-reference through the memo is legal pickle: the reader stores it without looping.
TEST(PickleReaderTest, CyclesAreStoredNotFollowed) {
  auto tree = ReadPickle(B("\x80\x04]\x94h\x00" "a."), "t.pkl");
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(tree->items(tree->root())[0], tree->root());
}

// Every cut of a real snapshot is an error, never a crash or a bogus success.
// A list appended to in batches, a dict built whole between them (as a pickler writes a
// long list of dicts): every item in order once the tree is finished.
TEST(PickleTreeTest, ItemsOfAContainerGrownAroundAnotherStayInOrder) {
  PickleTreeBuilder b;
  const PickleId list = b.Container(PickleKind::kList, 0);
  const PickleId one = b.Int(1, 1);
  b.Append(list, {one});
  const PickleId dict = b.Container(PickleKind::kDict, 2);
  const PickleId key = b.String("k", 3);
  b.Append(dict, {key, one});
  const PickleId two = b.Int(2, 4);
  b.Append(list, {dict, two});
  b.Append(list, {one});
  const PickleTree t = std::move(b).Finish(list);
  EXPECT_EQ(std::vector<PickleId>(t.items(list).begin(), t.items(list).end()),
            (std::vector<PickleId>{one, dict, two, one}));
  EXPECT_EQ(t.Find(dict, "k"), one);
}

// Offsets keep their high bits past 4 GiB (GPUMEM_MAX_INPUT may allow 16 GiB).
TEST(PickleTreeTest, OffsetsPastFourGiBReadBack) {
  PickleTreeBuilder b;
  const std::uint64_t gib = std::uint64_t{1} << 30;
  const PickleId a = b.Int(1, 10);
  const PickleId c = b.Int(2, 5 * gib);
  const PickleId d = b.String("x", 9 * gib + 7);
  const PickleId e = b.None(9 * gib + 8);
  const PickleTree t = std::move(b).Finish(a);
  EXPECT_EQ(t.offset(a), 10u);
  EXPECT_EQ(t.offset(c), 5 * gib);
  EXPECT_EQ(t.offset(d), 9 * gib + 7);
  EXPECT_EQ(t.offset(e), 9 * gib + 8);
  EXPECT_EQ(t.kind(d), PickleKind::kString);
  EXPECT_EQ(t.as_string(d), "x");
}

TEST(PickleReaderTest, EveryTruncationOfARealSnapshotIsAnError) {
  auto data = ReadFileDecompressed(std::string(GPUMEM_TEST_DATA) + "/leaky_mlp.pickle.xz");
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_TRUE(ReadPickle(*data, "t.pkl").ok());
  // The STOP is the last byte, so any proper prefix lacks it. Cut points spread evenly,
  // plus the first and last ones.
  const std::size_t spread = kSanitized ? 60 : 500;
  const std::size_t ends = kSanitized ? 20 : 100;
  std::vector<std::size_t> cuts;
  for (std::size_t i = 0; i < ends; ++i) cuts.push_back(i);
  for (std::size_t i = 0; i < ends; ++i) cuts.push_back(data->size() - 1 - i);
  for (std::size_t i = 0; i < spread; ++i) cuts.push_back(i * (data->size() / spread));
  for (std::size_t cut : cuts) {
    auto tree = ReadPickle(absl::string_view(*data).substr(0, cut), "t.pkl");
    ASSERT_FALSE(tree.ok()) << "cut at " << cut;
    EXPECT_EQ(tree.status().message().substr(0, 11), "t.pkl: byte");
  }
}

}  // namespace
}  // namespace gpumem::trace
