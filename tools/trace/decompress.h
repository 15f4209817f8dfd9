// Reading with transparent decompression (xz, gzip, zstd), chosen by the file's magic
// bytes, not its name. DecompressingReader hands out the decompressed bytes piece by
// piece, so a multi-gigabyte trace is parsed without ever holding all of its text.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpumem::trace {

class DecompressingReader {
 public:
  // Errors name the file: a missing or unreadable file.
  static absl::StatusOr<std::unique_ptr<DecompressingReader>> OpenFile(const std::string& path);
  // The same for bytes already in memory; `name` is used in error messages.
  static std::unique_ptr<DecompressingReader> FromBytes(std::string data, const std::string& name);

  ~DecompressingReader();
  DecompressingReader(const DecompressingReader&) = delete;
  DecompressingReader& operator=(const DecompressingReader&) = delete;

  // The next piece of decompressed bytes, valid until the next call; empty at the end.
  // A truncated or corrupt stream is an error naming the file and the compressed byte.
  absl::StatusOr<absl::string_view> Next();
  // The piece the next Next() will return, to choose a parser by the first bytes.
  absl::StatusOr<absl::string_view> Peek();

  // "none", "xz", "gzip" or "zstd".
  const char* codec_name() const;
  // At most this many bytes come out (decompressed): past it Next() is an error naming
  // the limit and GPUMEM_MAX_INPUT. OpenFile sets it from input_limit.h; FromBytes too.
  void set_max_bytes(std::uint64_t max_bytes) { max_bytes_ = max_bytes; }
  std::uint64_t max_bytes() const { return max_bytes_; }

  // Compressed bytes consumed so far and in all (0 when the size is unknown): progress.
  std::uint64_t consumed() const { return consumed_; }
  std::uint64_t total() const { return total_; }
  const std::string& name() const { return name_; }

 private:
  enum class Codec { kNone, kXz, kGzip, kZstd };
  struct State;  // the codec's stream state

  DecompressingReader(std::string name, std::FILE* file, std::string data);
  absl::Status Start();
  // Refills the input buffer when it is empty; false at the end of the input.
  absl::StatusOr<bool> Fill();
  absl::StatusOr<absl::string_view> Read();
  absl::StatusOr<absl::string_view> DecodeSome();
  // One decoder call over the first `given` pending bytes: the input it used (still
  // pending) and the output it made in out_.
  struct Decoded {
    std::size_t used;
    std::size_t produced;
  };
  absl::StatusOr<Decoded> DecodeXz(std::size_t given, bool at_end);
  absl::StatusOr<Decoded> DecodeGzip(std::size_t given, bool at_end);
  absl::StatusOr<Decoded> DecodeZstd(std::size_t given, bool at_end);
  absl::Status StreamError(const char* why) const;
  // Counts `piece` against the limit: the piece, or the error once the limit is passed.
  absl::StatusOr<absl::string_view> Counted(absl::string_view piece);

  const std::string name_;
  std::FILE* file_ = nullptr;
  std::string memory_;        // the input when it came from memory
  std::vector<char> in_;      // compressed bytes read from the file
  absl::string_view pending_; // of them, not yet consumed by the codec
  bool input_done_ = false;
  std::vector<char> out_;
  Codec codec_ = Codec::kNone;
  std::unique_ptr<State> state_;
  std::optional<absl::StatusOr<absl::string_view>> peeked_;
  bool finished_ = false;     // the codec reported the end of its (last) stream
  std::uint64_t consumed_ = 0;
  std::uint64_t total_ = 0;
  std::uint64_t produced_ = 0;  // decompressed bytes handed out
  std::uint64_t max_bytes_ = 0;
};

// The whole file's bytes, decompressed (for formats parsed from one buffer).
absl::StatusOr<std::string> ReadFileDecompressed(const std::string& path);

// The rest of `reader`'s bytes in one string.
absl::StatusOr<std::string> ReadAll(DecompressingReader& reader);

// The same, for bytes already in memory; `name` is used in error messages.
absl::StatusOr<std::string> Decompress(std::string data, const std::string& name);

}  // namespace gpumem::trace
