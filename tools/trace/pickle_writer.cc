#include "tools/trace/pickle_writer.h"

#include <cstring>
#include <limits>
#include <utility>

namespace gpumem::trace {

PickleWriter::PickleWriter() {
  Op(0x80);  // PROTO
  Op(4);
}

void PickleWriter::LittleEndian(std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out_.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

namespace {
constexpr std::uint32_t kBatch = 1000;  // Python's pickle._BATCHSIZE
}  // namespace

void PickleWriter::BeforeValue() {
  if (open_.empty()) return;
  Open& o = open_.back();
  if (o.items == (o.dict ? 2 * kBatch : kBatch)) {
    Op(o.dict ? 'u' : 'e');
    Op('(');
    o.items = 0;
  }
}

void PickleWriter::None() {
  BeforeValue();
  Op('N');
  AfterValue();
}

void PickleWriter::Bool(bool value) {
  BeforeValue();
  Op(value ? 0x88 : 0x89);
  AfterValue();
}

void PickleWriter::Int(std::int64_t value) {
  BeforeValue();
  WriteInt(value);
  AfterValue();
}

void PickleWriter::Uint(std::uint64_t value) {
  BeforeValue();
  WriteUint(value);
  AfterValue();
}

void PickleWriter::IntPair(std::int64_t first, std::int64_t second) {
  BeforeValue();
  WriteInt(first);
  WriteInt(second);
  Op(0x86);  // TUPLE2
  AfterValue();
}

// The shortest form, as Python's pickler chooses it.
void PickleWriter::WriteInt(std::int64_t value) {
  if (value >= 0 && value < 0x100) {
    Op('K');
    LittleEndian(static_cast<std::uint64_t>(value), 1);
  } else if (value >= 0 && value < 0x10000) {
    Op('M');
    LittleEndian(static_cast<std::uint64_t>(value), 2);
  } else if (value >= std::numeric_limits<std::int32_t>::min() &&
             value <= std::numeric_limits<std::int32_t>::max()) {
    Op('J');
    LittleEndian(static_cast<std::uint64_t>(value), 4);
  } else {
    // LONG1: the fewest little-endian two's-complement bytes that keep the sign.
    int n = 1;
    while (n < 8) {
      const std::int64_t lo = -(std::int64_t{1} << (8 * n - 1));
      const std::int64_t hi = (std::int64_t{1} << (8 * n - 1)) - 1;
      if (value >= lo && value <= hi) break;
      ++n;
    }
    Op(0x8a);
    Op(static_cast<unsigned char>(n));
    LittleEndian(static_cast<std::uint64_t>(value), n);
  }
}

void PickleWriter::WriteUint(std::uint64_t value) {
  if (value <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    WriteInt(static_cast<std::int64_t>(value));
    return;
  }
  Op(0x8a);  // LONG1, 8 bytes and a zero sign byte
  Op(9);
  LittleEndian(value, 8);
  Op(0);
}

void PickleWriter::Float(double value) {
  BeforeValue();
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  Op('G');
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  AfterValue();
}

void PickleWriter::String(absl::string_view value) {
  if (auto it = strings_.find(value); it != strings_.end()) {
    Get(it->second);
    return;
  }
  BeforeValue();
  if (value.size() < 0x100) {
    Op(0x8c);  // SHORT_BINUNICODE
    LittleEndian(value.size(), 1);
  } else if (value.size() <= std::numeric_limits<std::uint32_t>::max()) {
    Op('X');  // BINUNICODE
    LittleEndian(value.size(), 4);
  } else {
    Op(0x8d);  // BINUNICODE8
    LittleEndian(value.size(), 8);
  }
  out_.append(value.data(), value.size());
  strings_.emplace(std::string(value), Memoize());
  AfterValue();
}

// EMPTY_LIST MARK items APPENDS: an empty MARK..APPENDS is valid, which keeps this streaming.
void PickleWriter::BeginList() {
  BeforeValue();
  Op(']');
  Op('(');
  open_.push_back({false, 0});
}
void PickleWriter::EndList() {
  Op('e');
  open_.pop_back();
  AfterValue();
}
void PickleWriter::BeginDict() {
  BeforeValue();
  Op('}');
  Op('(');
  open_.push_back({true, 0});
}
void PickleWriter::EndDict() {
  Op('u');
  open_.pop_back();
  AfterValue();
}

std::uint32_t PickleWriter::Memoize() {
  Op(0x94);
  return memo_size_++;
}

void PickleWriter::Get(std::uint32_t memo_index) {
  BeforeValue();
  if (memo_index < 0x100) {
    Op('h');  // BINGET
    LittleEndian(memo_index, 1);
  } else {
    Op('j');  // LONG_BINGET
    LittleEndian(memo_index, 4);
  }
  AfterValue();
}

std::string PickleWriter::Finish() && {
  Op('.');
  return std::move(out_);
}

}  // namespace gpumem::trace
