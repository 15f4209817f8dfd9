// The raw journal of a gpumem trace (format version 2, docs/trace-format.md): regions of
// fixed-size records inside the mmap'd trace file, into which recording threads write
// each event as it happens, so a SIGKILL cannot lose an event whose recording call
// returned. The writer thread compresses them into records chunks later and marks how
// far it got with journal-mark records; a reader takes from a region only the records
// past that mark. Shared by the writer (profiler/) and the reader (tools/trace/).
//
//   journal chunk payload = journal header (16) + lead x 0 + capacity x record (64)
//   journal header        = u32 region id, u32 record bytes (64), u32 capacity, u32 lead
//   (lead < 64 puts the records at a file offset that is a multiple of 64: one record
//   per cache line)
//   record                = i64 time_ns, u64 addr, u64 size, u64 stream, u64 extra,
//                           u32 stack, u32 thread, i32 device, u8 type, u8 flags,
//                           u16 check, u64 commit (= index + 1, stored last)
//   flags                 = 0x01 extra is present, 0x02 extra is a forward autograd link
//
// Record `index` of a region (0, 1, 2, ... over the region's whole life, whichever thread
// owns it) lives at slot index % capacity.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#include "profiler/raw_record.h"
#include "profiler/trace_format.h"

namespace gpumem::format {

inline constexpr std::size_t kJournalHeaderBytes = 16;
inline constexpr std::size_t kJournalRecordBytes = 64;
// Bounds a reader enforces on a journal chunk (the writer uses far fewer).
inline constexpr std::uint32_t kMaxJournalRecords = (kMaxStoredLen - kJournalHeaderBytes) /
                                                    kJournalRecordBytes - 1;
inline constexpr std::uint8_t kJournalFlagExtra = 0x01;
// An allocation's autograd link without a node frame (made on the forward thread) rides
// in its own slot's extra word: sequence number in the low 48 bits, forward thread in the
// high 16. A link with a node frame, or wider numbers, takes a slot of its own before the
// allocation (JournalLinkOf). Forward allocations are about half of a training step's
// (resnet50 on an H100: 445 of ~980 a step), and each paid for a second slot.
inline constexpr std::uint8_t kJournalFlagForwardLink = 0x02;
inline constexpr int kForwardLinkThreadShift = 48;

inline bool LinkFitsInSlot(const RawRecord& r) {
  return r.has_autograd && r.autograd_node_frame == 0 && !r.has_extra &&
         r.type == RecordType::kAlloc && r.autograd_seq >> kForwardLinkThreadShift == 0 &&
         r.autograd_thread >> (64 - kForwardLinkThreadShift) == 0;
}


// The 64 bytes of one journal record, as laid out in the file (little-endian hosts only:
// the writer stores these words as they are in memory; x86-64 and aarch64 Linux are).
struct alignas(64) JournalRecord {
  std::int64_t time_ns;
  std::uint64_t addr;
  std::uint64_t size;
  std::uint64_t stream;
  std::uint64_t extra;
  std::uint32_t stack_id;
  std::uint32_t thread;
  std::int32_t device;
  std::uint8_t type;
  std::uint8_t flags;
  std::uint16_t check;
  std::uint64_t commit;  // index + 1; 0 = never written
};
static_assert(sizeof(JournalRecord) == kJournalRecordBytes);
// FillJournalRecord stores the record as words: stack_id | thread << 32 at 40, and
// device | type << 32 | flags << 40 | check << 48 at 48.
static_assert(offsetof(JournalRecord, stack_id) == 40 && offsetof(JournalRecord, thread) == 44 &&
              offsetof(JournalRecord, device) == 48 && offsetof(JournalRecord, type) == 52 &&
              offsetof(JournalRecord, flags) == 53 && offsetof(JournalRecord, check) == 54 &&
              offsetof(JournalRecord, commit) == 56);

// A 16-bit check over the record's fields and its index: a damaged record (or garbage
// where a record should be) fails it with odds 65535 in 65536. The products are
// independent of each other, so the hot path computes them in parallel.
inline std::uint16_t JournalCheck(const std::uint64_t (&w)[7], std::uint64_t index) {
  std::uint64_t h = (index + 1) * 0x9E3779B97F4A7C15ull + w[0] * 0xC2B2AE3D27D4EB4Full +
                    w[1] * 0x165667B19E3779F9ull + w[2] * 0xD6E8FEB86659FD93ull +
                    w[3] * 0xFF51AFD7ED558CCDull + w[4] * 0xC4CEB9FE1A85EC53ull +
                    w[5] * 0x94D049BB133111EBull + w[6] * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  h *= 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return static_cast<std::uint16_t>(h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48));
}

// The seven words the check covers: the u64 at offsets 0..40 and device | type << 32 |
// flags << 40.
inline void JournalCheckWords(const JournalRecord& r, std::uint64_t (&w)[7]) {
  std::memcpy(w, &r, 48);
  w[6] = std::uint64_t{static_cast<std::uint32_t>(r.device)} | (std::uint64_t{r.type} << 32) |
         (std::uint64_t{r.flags} << 40);
}

// Writes record `index` into its slot but for the commit word, which the caller stores
// last (with release order). The seven words are made in registers from the event's
// fields and stored one by one: a record built on the stack and copied out was read back
// in 16-byte pieces that straddle its narrower stores, which the processor cannot forward
// and waits out (a third of the append's samples on the VM).
inline void FillJournalRecord(const RawRecord& in, std::uint64_t index, JournalRecord* out) {
  const bool link = LinkFitsInSlot(in);
  const std::uint8_t flags =
      (in.has_extra ? kJournalFlagExtra : 0) | (link ? kJournalFlagForwardLink : 0);
  const std::uint64_t extra =
      link ? in.autograd_seq | std::uint64_t{in.autograd_thread} << kForwardLinkThreadShift
           : in.extra;
  const std::uint64_t w[7] = {
      static_cast<std::uint64_t>(in.time_ns), in.addr, in.size, in.stream, extra,
      std::uint64_t{in.stack_id} | (std::uint64_t{in.thread} << 32),
      std::uint64_t{static_cast<std::uint32_t>(in.device)} |
          (std::uint64_t{static_cast<std::uint8_t>(in.type)} << 32) |
          (std::uint64_t{flags} << 40)};
  const std::uint16_t check = JournalCheck(w, index);
  auto* bytes = reinterpret_cast<unsigned char*>(out);
  for (int i = 0; i < 6; ++i) std::memcpy(bytes + 8 * i, &w[i], 8);
  const std::uint64_t last = w[6] | (std::uint64_t{check} << 48);  // device, type, flags, check
  std::memcpy(bytes + 48, &last, 8);
}

// An allocation with an autograd link that does not fit its slot (LinkFitsInSlot) takes
// two: the link first (type kAutograd: addr = sequence number, size = forward thread,
// stack_id = node frame), then the event.
inline RawRecord JournalLinkOf(const RawRecord& alloc) {
  RawRecord link;
  link.type = RecordType::kAutograd;
  link.time_ns = alloc.time_ns;
  link.thread = alloc.thread;
  link.device = alloc.device;
  link.addr = alloc.autograd_seq;
  link.size = alloc.autograd_thread;
  link.stack_id = alloc.autograd_node_frame;
  return link;
}

// Puts a link slot's fields back on the allocation that follows it.
inline void AttachJournalLink(const RawRecord& link, RawRecord* alloc) {
  alloc->has_autograd = true;
  alloc->autograd_seq = link.addr;
  alloc->autograd_thread = static_cast<std::uint32_t>(link.size);
  alloc->autograd_node_frame = link.stack_id;
}

// A slot's fields as a record, with the link FillJournalRecord folded into the extra word
// put back (LinkFitsInSlot). No checks: the writer drains its own slots with it, and
// ReadJournalRecord checks a file's first.
inline RawRecord RecordOfSlot(const JournalRecord& slot) {
  RawRecord r;
  r.time_ns = slot.time_ns;
  r.addr = slot.addr;
  r.size = slot.size;
  r.stream = slot.stream;
  r.stack_id = slot.stack_id;
  r.thread = slot.thread;
  r.device = slot.device;
  r.type = static_cast<RecordType>(slot.type);
  r.has_extra = (slot.flags & kJournalFlagExtra) != 0;
  if ((slot.flags & kJournalFlagForwardLink) != 0) {
    r.has_autograd = true;
    r.autograd_seq = slot.extra & ((std::uint64_t{1} << kForwardLinkThreadShift) - 1);
    r.autograd_thread = static_cast<std::uint32_t>(slot.extra >> kForwardLinkThreadShift);
  } else {
    r.extra = slot.extra;
  }
  return r;
}

// The record in a slot if it is record `index`, whole and an event or an autograd link;
// else nullopt.
inline std::optional<RawRecord> ReadJournalRecord(const unsigned char* slot,
                                                  std::uint64_t index) {
  JournalRecord r;
  std::memcpy(&r, slot, sizeof(r));
  std::uint64_t w[7];
  JournalCheckWords(r, w);
  if (r.commit != index + 1 || r.check != JournalCheck(w, index)) return std::nullopt;
  const bool event = (r.type >= static_cast<std::uint8_t>(RecordType::kAlloc) &&
                      r.type <= static_cast<std::uint8_t>(RecordType::kSegmentFree)) ||
                     r.type == static_cast<std::uint8_t>(RecordType::kCapacity) ||
                     r.type == static_cast<std::uint8_t>(RecordType::kFailedAlloc);
  const bool folded_link = (r.flags & kJournalFlagForwardLink) != 0;
  if ((!event && r.type != static_cast<std::uint8_t>(RecordType::kAutograd)) ||
      (r.flags & ~(kJournalFlagExtra | kJournalFlagForwardLink)) != 0 ||
      (folded_link && ((r.flags & kJournalFlagExtra) != 0 ||
                       r.type != static_cast<std::uint8_t>(RecordType::kAlloc)))) {
    return std::nullopt;
  }
  return RecordOfSlot(r);
}

}  // namespace gpumem::format
