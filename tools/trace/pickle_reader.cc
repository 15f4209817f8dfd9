#include "tools/trace/pickle_reader.h"

#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/trace/pickle_nesting.h"

namespace gpumem::trace {
namespace {

// Every opcode of pickle protocols 0-5, so that a refusal can name what it found.
const char* OpcodeName(unsigned char op) {
  switch (op) {
    case '(': return "MARK";          case '.': return "STOP";
    case '0': return "POP";           case '1': return "POP_MARK";
    case '2': return "DUP";           case 'F': return "FLOAT";
    case 'I': return "INT";           case 'J': return "BININT";
    case 'K': return "BININT1";       case 'L': return "LONG";
    case 'M': return "BININT2";       case 'N': return "NONE";
    case 'P': return "PERSID";        case 'Q': return "BINPERSID";
    case 'R': return "REDUCE";        case 'S': return "STRING";
    case 'T': return "BINSTRING";     case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";       case 'X': return "BINUNICODE";
    case 'a': return "APPEND";        case 'b': return "BUILD";
    case 'c': return "GLOBAL";        case 'd': return "DICT";
    case '}': return "EMPTY_DICT";    case 'e': return "APPENDS";
    case 'g': return "GET";           case 'h': return "BINGET";
    case 'i': return "INST";          case 'j': return "LONG_BINGET";
    case 'l': return "LIST";          case ']': return "EMPTY_LIST";
    case 'o': return "OBJ";           case 'p': return "PUT";
    case 'q': return "BINPUT";        case 'r': return "LONG_BINPUT";
    case 's': return "SETITEM";       case 't': return "TUPLE";
    case ')': return "EMPTY_TUPLE";   case 'u': return "SETITEMS";
    case 'G': return "BINFLOAT";      case 'B': return "BINBYTES";
    case 'C': return "SHORT_BINBYTES";
    case 0x80: return "PROTO";        case 0x81: return "NEWOBJ";
    case 0x82: return "EXT1";         case 0x83: return "EXT2";
    case 0x84: return "EXT4";         case 0x85: return "TUPLE1";
    case 0x86: return "TUPLE2";       case 0x87: return "TUPLE3";
    case 0x88: return "NEWTRUE";      case 0x89: return "NEWFALSE";
    case 0x8a: return "LONG1";        case 0x8b: return "LONG4";
    case 0x8c: return "SHORT_BINUNICODE";
    case 0x8d: return "BINUNICODE8";  case 0x8e: return "BINBYTES8";
    case 0x8f: return "EMPTY_SET";    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";    case 0x92: return "NEWOBJ_EX";
    case 0x93: return "STACK_GLOBAL"; case 0x94: return "MEMOIZE";
    case 0x95: return "FRAME";        case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";  case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

constexpr PickleId kNoValue = std::numeric_limits<PickleId>::max();

class Reader {
 public:
  Reader(absl::string_view data, const std::string& name, const PickleLimits& limits)
      : data_(data), name_(name), limits_(limits) {}

  absl::StatusOr<PickleTree> Run() {
    if (data_.empty()) return Error(0, "empty file");
    // Real snapshots take 15 bytes a value and 3.5 a container item; memory only reserved
    // is not touched (but counts against a limit on address space: about 4x the input).
    builder_.Reserve(data_.size() / 8 + 64, data_.size() / 3 + 64);
    while (true) {
      if (pos_ >= data_.size()) return Error(pos_, "truncated: no STOP opcode before the end");
      op_start_ = pos_;
      const unsigned char op = static_cast<unsigned char>(data_[pos_++]);
      absl::Status status = Step(op);
      if (!status.ok()) return status;
      if (done_) return Finish();
    }
  }

 private:
  absl::Status Error(std::uint64_t at, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": byte ", at, ": ", what));
  }
  absl::Status OpError(absl::string_view what) const {
    return Error(op_start_, absl::StrCat(OpcodeName(static_cast<unsigned char>(data_[op_start_])),
                                         ": ", what));
  }

  // Bounds-checked reads of the opcode's argument.
  bool Take(std::uint64_t n, const char** out) {
    if (n > data_.size() - pos_) return false;
    *out = data_.data() + pos_;
    pos_ += n;
    return true;
  }
  template <typename T>
  bool TakeLE(T* out) {
    const char* p;
    if (!Take(sizeof(T), &p)) return false;
    T v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      v |= static_cast<T>(static_cast<T>(static_cast<unsigned char>(p[i])) << (8 * i));
    }
    *out = v;
    return true;
  }
  bool TakeLine(absl::string_view* line) {
    std::size_t end = data_.find('\n', pos_);
    if (end == absl::string_view::npos) return false;
    *line = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return true;
  }
  absl::Status Truncated() const { return OpError("truncated argument"); }

  absl::StatusOr<PickleTree> Finish() {
    const PickleId root = stack_.back();
    builder_.Settle();
    if (auto fault = CheckNesting(builder_.tree(), root, limits_.max_depth)) {
      return Error(builder_.tree().offset(fault->at), fault->what);
    }
    return std::move(builder_).Finish(root);
  }

  absl::Status Push(PickleId id) {
    if (stack_.size() >= limits_.max_stack) {
      return OpError(absl::StrCat("more than ", limits_.max_stack, " values on the stack"));
    }
    if (builder_.tree().size() >= kNoValue - 1) return OpError("too many values");
    stack_.push_back(id);
    return absl::OkStatus();
  }
  absl::Status PushString(std::uint64_t len, PickleKind kind) {
    const char* p;
    if (len > std::numeric_limits<std::uint32_t>::max()) return OpError("string over 4 GiB");
    if (!Take(len, &p)) return Truncated();
    return Push(builder_.String(absl::string_view(p, len), op_start_, kind));
  }
  // Start of the topmost MARK's items on the stack.
  absl::StatusOr<std::size_t> PopMark() {
    if (marks_.empty()) return OpError("no MARK before it");
    std::size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }
  // Values below the topmost MARK are out of reach until that MARK is popped (as in
  // CPython's unpickler), so a mark never points past the stack's end.
  std::size_t Fence() const { return marks_.empty() ? 0 : marks_.back(); }
  absl::Status NeedStack(std::size_t n) const {
    if (stack_.size() - Fence() < n) return OpError("stack underflow");
    return absl::OkStatus();
  }
  // Items from stack_[from] on become a new tuple (or list / dict) pushed in their place.
  absl::Status Collect(PickleKind kind, std::size_t from) {
    if (kind == PickleKind::kDict && (stack_.size() - from) % 2 != 0) {
      return OpError("odd number of items for a dict");
    }
    PickleId c = builder_.Container(kind, op_start_);
    if (kind == PickleKind::kDict) {
      for (std::size_t i = from; i < stack_.size(); i += 2) {
        absl::Status s = CheckKey(stack_[i]);
        if (!s.ok()) return s;
      }
    }
    builder_.Append(c, absl::MakeConstSpan(stack_).subspan(from));
    stack_.resize(from);
    return Push(c);
  }
  absl::Status CheckKey(PickleId key) const {
    PickleKind k = builder_.tree().kind(key);
    if (k == PickleKind::kList || k == PickleKind::kDict) {
      return OpError(absl::StrCat("unhashable dict key of type ", PickleKindName(k)));
    }
    return absl::OkStatus();
  }
  // Appends stack_[from..] to the list (or, for SETITEM(S), dict) at stack_[from - 1].
  absl::Status AddItems(PickleKind want, std::size_t from) {
    if (from <= Fence()) return OpError("stack underflow: no container below the items");
    PickleId target = stack_[from - 1];
    PickleKind k = builder_.tree().kind(target);
    if (k != want) {
      return OpError(absl::StrCat("target is a ", PickleKindName(k), ", not a ", PickleKindName(want)));
    }
    if (want == PickleKind::kDict) {
      if ((stack_.size() - from) % 2 != 0) return OpError("odd number of items for a dict");
      for (std::size_t i = from; i < stack_.size(); i += 2) {
        absl::Status s = CheckKey(stack_[i]);
        if (!s.ok()) return s;
      }
    }
    builder_.Append(target, absl::MakeConstSpan(stack_).subspan(from));
    stack_.resize(from);
    return absl::OkStatus();
  }
  absl::Status Put(std::uint64_t index) {
    absl::Status s = NeedStack(1);
    if (!s.ok()) return s;
    // A pickler numbers its memo from 0 with one memo opcode per entry, so no honest index
    // exceeds the input's length; the cap bounds the memo table's size.
    if (index > data_.size()) return OpError(absl::StrCat("memo index ", index, " out of range"));
    if (index >= memo_.size()) memo_.resize(index + 1, kNoValue);
    if (memo_[index] == kNoValue) ++memo_count_;
    memo_[index] = stack_.back();
    return absl::OkStatus();
  }
  absl::Status Get(std::uint64_t index) {
    if (index >= memo_.size() || memo_[index] == kNoValue) {
      return OpError(absl::StrCat("memo index ", index, " was never set"));
    }
    return Push(memo_[index]);
  }

  // A little-endian operand of type T, handed to `then`.
  template <typename T, typename Then>
  absl::Status Operand(Then&& then) {
    T v;
    if (!TakeLE(&v)) return Truncated();
    return then(v);
  }

  absl::Status Step(unsigned char op) {
    auto put = [&](std::uint64_t i) { return Put(i); };
    auto get = [&](std::uint64_t i) { return Get(i); };
    auto int_of = [&](auto v) { return Push(builder_.Int(v, op_start_)); };
    auto string_of = [&](std::uint64_t n) { return PushString(n, PickleKind::kString); };
    auto bytes_of = [&](std::uint64_t n) { return PushString(n, PickleKind::kBytes); };
    switch (op) {
      case 0x80: return Operand<std::uint8_t>([&](std::uint8_t v) { return Proto(v); });
      case 0x95: return Operand<std::uint64_t>([&](std::uint64_t n) { return FrameHint(n); });
      case '.':  // STOP
        done_ = true;
        return NeedStack(1);
      case '(': return Mark();
      case '}': return Push(builder_.Container(PickleKind::kDict, op_start_));
      case ']': return Push(builder_.Container(PickleKind::kList, op_start_));
      case ')': return Push(builder_.Container(PickleKind::kTuple, op_start_));
      case 't': case 'l': case 'd': return CollectToMark(op);
      case 0x85: case 0x86: case 0x87: return SmallTuple(op - 0x84u);  // TUPLE1..3
      case 's': return AddFromStack(PickleKind::kDict, 3);
      case 'a': return AddFromStack(PickleKind::kList, 2);
      case 'u': case 'e': return AddToMark(op == 'u' ? PickleKind::kDict : PickleKind::kList);
      case 0x94: return Put(memo_count_);  // MEMOIZE
      case 'q': return Operand<std::uint8_t>(put);
      case 'r': return Operand<std::uint32_t>(put);
      case 'h': return Operand<std::uint8_t>(get);
      case 'j': return Operand<std::uint32_t>(get);
      case 'p': case 'g': return TextMemo(op == 'p');
      case 'N': return Push(builder_.None(op_start_));
      case 0x88: return Push(builder_.Bool(true, op_start_));
      case 0x89: return Push(builder_.Bool(false, op_start_));
      case 'J':
        return Operand<std::uint32_t>([&](std::uint32_t v) { return int_of(static_cast<std::int32_t>(v)); });
      case 'K': return Operand<std::uint8_t>(int_of);
      case 'M': return Operand<std::uint16_t>(int_of);
      case 'I': return TextInt();
      case 0x8a: return Long1();
      case 'G': return BinFloat();
      case 0x8c: return Operand<std::uint8_t>(string_of);
      case 'X': return Operand<std::uint32_t>(string_of);
      case 0x8d: return Operand<std::uint64_t>(string_of);
      case 'C': return Operand<std::uint8_t>(bytes_of);
      case 'B': return Operand<std::uint32_t>(bytes_of);
      default: {
        const char* known = OpcodeName(op);
        if (known) return OpError("not supported (snapshots hold only plain data)");
        return Error(op_start_, absl::StrFormat("unknown opcode 0x%02x", op));
      }
    }
  }

  absl::Status Proto(std::uint8_t version) {
    if (version > 5) return OpError(absl::StrCat("unsupported protocol ", version));
    return absl::OkStatus();
  }

  // FRAME: a length hint for buffered reading; the data is all here.
  absl::Status FrameHint(std::uint64_t n) {
    if (n > data_.size() - pos_) return OpError("frame runs past the end of the data");
    return absl::OkStatus();
  }

  absl::Status Mark() {
    if (marks_.size() >= limits_.max_marks) {
      return OpError(absl::StrCat("more than ", limits_.max_marks, " nested MARKs"));
    }
    marks_.push_back(stack_.size());
    return absl::OkStatus();
  }

  // TUPLE, LIST, DICT: everything above the last mark, as one container.
  absl::Status CollectToMark(unsigned char op) {
    absl::StatusOr<std::size_t> m = PopMark();
    if (!m.ok()) return m.status();
    const PickleKind k =
        op == 't' ? PickleKind::kTuple : op == 'l' ? PickleKind::kList : PickleKind::kDict;
    return Collect(k, *m);
  }

  absl::Status SmallTuple(std::size_t n) {
    if (absl::Status s = NeedStack(n); !s.ok()) return s;
    return Collect(PickleKind::kTuple, stack_.size() - n);
  }

  // SETITEM, APPEND: the top `depth - 1` values into the container below them.
  absl::Status AddFromStack(PickleKind kind, std::size_t depth) {
    if (absl::Status s = NeedStack(depth); !s.ok()) return s;
    return AddItems(kind, stack_.size() - (depth - 1));
  }

  // SETITEMS, APPENDS: everything above the last mark into the container below it.
  absl::Status AddToMark(PickleKind kind) {
    absl::StatusOr<std::size_t> m = PopMark();
    if (!m.ok()) return m.status();
    return AddItems(kind, *m);
  }

  // PUT, GET: a memo index spelled out on a line.
  absl::Status TextMemo(bool put) {
    absl::string_view line;
    std::uint64_t i;
    if (!TakeLine(&line)) return Truncated();
    if (!absl::SimpleAtoi(line, &i)) return OpError("bad memo index");
    return put ? Put(i) : Get(i);
  }

  // INT: a text int; protocol 0 spells bools I00 / I01.
  absl::Status TextInt() {
    absl::string_view line;
    if (!TakeLine(&line)) return Truncated();
    if (line == "00" || line == "01") return Push(builder_.Bool(line == "01", op_start_));
    std::int64_t i;
    std::uint64_t u;
    if (absl::SimpleAtoi(line, &i)) return Push(builder_.Int(i, op_start_));
    if (absl::SimpleAtoi(line, &u)) return Push(builder_.Uint(u, op_start_));
    return OpError("not a 64-bit integer");
  }

  // BINFLOAT: a big-endian double.
  absl::Status BinFloat() {
    const char* p;
    if (!Take(8, &p)) return Truncated();
    std::uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(p[i]);
    double d;
    std::memcpy(&d, &bits, sizeof d);
    return Push(builder_.Float(d, op_start_));
  }

  // LONG1: n little-endian two's-complement bytes. Anything in int64 or uint64 is accepted
  // (a uint64 above 2^63 needs a ninth, zero byte).
  absl::Status Long1() {
    std::uint8_t n;
    const char* p;
    if (!TakeLE(&n) || !Take(n, &p)) return Truncated();
    if (n == 0) return Push(builder_.Int(0, op_start_));
    const bool negative = (static_cast<unsigned char>(p[n - 1]) & 0x80) != 0;
    std::size_t len = n;
    if (len == 9 && !negative && p[8] == 0) len = 8;  // the sign byte of a large uint64
    else if (len > 8) return OpError(absl::StrCat(n, "-byte integer does not fit 64 bits"));
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < len; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
    if (n == 9) return Push(builder_.Uint(v, op_start_));
    if (negative && len < 8) v |= ~std::uint64_t{0} << (8 * len);  // sign-extend
    return Push(builder_.Int(static_cast<std::int64_t>(v), op_start_));
  }

  absl::string_view data_;
  const std::string& name_;
  PickleLimits limits_;
  std::uint64_t pos_ = 0;
  std::uint64_t op_start_ = 0;
  bool done_ = false;
  PickleTreeBuilder builder_;
  std::vector<PickleId> stack_;
  std::vector<std::size_t> marks_;
  std::vector<PickleId> memo_;
  std::uint64_t memo_count_ = 0;
};

}  // namespace

absl::StatusOr<PickleTree> ReadPickle(absl::string_view data, const std::string& name,
                                      const PickleLimits& limits) {
  return Reader(data, name, limits).Run();
}

}  // namespace gpumem::trace
