#include "tools/trace/decompress.h"

#include <lzma.h>
#include <sys/stat.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tools/trace/input_limit.h"

namespace gpumem::trace {
namespace {

// Big enough that the per-call overhead vanishes, small enough to stay in cache-ish sizes.
constexpr std::size_t kInputPiece = 1 << 20;
constexpr std::size_t kOutputPiece = 1 << 20;
// Input already in memory is mostly small (and fuzzed): smaller pieces, cheaper to set up.
constexpr std::size_t kMemoryOutputPiece = 64 << 10;
// An xz header may ask for a dictionary of up to 1.5 GiB; xz -9 needs 65 MiB to decode.
constexpr std::uint64_t kXzMemoryLimit = 512 << 20;

}  // namespace

struct DecompressingReader::State {
  lzma_stream xz = LZMA_STREAM_INIT;
  z_stream gz{};
  ZSTD_DCtx* zstd = nullptr;
  std::size_t zstd_last = 1;  // ZSTD_decompressStream's last hint: 0 = a frame just ended
  Codec codec = Codec::kNone;

  ~State() {
    if (codec == Codec::kXz) lzma_end(&xz);
    if (codec == Codec::kGzip) inflateEnd(&gz);
    if (zstd != nullptr) ZSTD_freeDCtx(zstd);
  }
};

DecompressingReader::DecompressingReader(std::string name, std::FILE* file, std::string data)
    : name_(std::move(name)), file_(file), memory_(std::move(data)) {}

DecompressingReader::~DecompressingReader() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::StatusOr<std::unique_ptr<DecompressingReader>> DecompressingReader::OpenFile(
    const std::string& path) {
  absl::StatusOr<std::uint64_t> limit = MaxInputBytes();
  if (!limit.ok()) return limit.status();
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::unique_ptr<DecompressingReader> reader(new DecompressingReader(path, file, ""));
  reader->max_bytes_ = *limit;
  struct stat st{};
  if (fstat(fileno(file), &st) == 0) {
    // fopen opens a folder for reading; the first read would fail with a vaguer error.
    if (S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a trace file"));
    }
    if (S_ISREG(st.st_mode)) reader->total_ = static_cast<std::uint64_t>(st.st_size);
  }
  reader->in_.resize(kInputPiece);
  if (absl::Status s = reader->Start(); !s.ok()) return s;
  return reader;
}

std::unique_ptr<DecompressingReader> DecompressingReader::FromBytes(std::string data,
                                                                    const std::string& name) {
  std::unique_ptr<DecompressingReader> reader(
      new DecompressingReader(name, nullptr, std::move(data)));
  reader->total_ = reader->memory_.size();
  reader->max_bytes_ = MaxInputBytes().value_or(kDefaultMaxInputBytes);
  reader->pending_ = reader->memory_;
  reader->input_done_ = true;
  // Start() only fails on a read error, which memory cannot have.
  (void)reader->Start();
  return reader;
}

absl::StatusOr<bool> DecompressingReader::Fill() {
  if (!pending_.empty()) return true;
  if (input_done_ || file_ == nullptr) {
    input_done_ = true;
    return false;
  }
  const std::size_t n = std::fread(in_.data(), 1, in_.size(), file_);
  if (n == 0) {
    if (std::ferror(file_)) {
      return absl::DataLossError(absl::StrCat(name_, ": read error: ", std::strerror(errno)));
    }
    input_done_ = true;
    return false;
  }
  pending_ = absl::string_view(in_.data(), n);
  return true;
}

absl::Status DecompressingReader::Start() {
  absl::StatusOr<bool> any = Fill();
  if (!any.ok()) return any.status();
  state_ = std::make_unique<State>();
  if (absl::StartsWith(pending_, absl::string_view("\xFD" "7zXZ\x00", 6))) {
    codec_ = Codec::kXz;
    if (lzma_stream_decoder(&state_->xz, kXzMemoryLimit, LZMA_CONCATENATED) != LZMA_OK) {
      return absl::InternalError(absl::StrCat(name_, ": cannot start the xz decoder"));
    }
  } else if (absl::StartsWith(pending_, "\x1F\x8B")) {
    codec_ = Codec::kGzip;
    if (inflateInit2(&state_->gz, 15 + 32) != Z_OK) {
      return absl::InternalError(absl::StrCat(name_, ": cannot start the gzip decoder"));
    }
  } else if (absl::StartsWith(pending_, "\x28\xB5\x2F\xFD")) {
    codec_ = Codec::kZstd;
    state_->zstd = ZSTD_createDCtx();
  }
  state_->codec = codec_;
  if (codec_ != Codec::kNone) out_.resize(file_ != nullptr ? kOutputPiece : kMemoryOutputPiece);
  return absl::OkStatus();
}

const char* DecompressingReader::codec_name() const {
  switch (codec_) {
    case Codec::kXz: return "xz";
    case Codec::kGzip: return "gzip";
    case Codec::kZstd: return "zstd";
    case Codec::kNone: break;
  }
  return "none";
}

absl::Status DecompressingReader::StreamError(const char* why) const {
  return absl::DataLossError(absl::StrCat(name_, ": ", codec_name(), " stream is ", why,
                                          " at compressed byte ", consumed_));
}

absl::StatusOr<absl::string_view> DecompressingReader::Peek() {
  if (!peeked_) peeked_ = Read();
  return *peeked_;
}

absl::StatusOr<absl::string_view> DecompressingReader::Next() {
  if (!peeked_) return Read();
  absl::StatusOr<absl::string_view> piece = std::move(*peeked_);
  peeked_.reset();
  return piece;
}

absl::StatusOr<absl::string_view> DecompressingReader::Read() {
  if (codec_ != Codec::kNone) {
    absl::StatusOr<absl::string_view> piece = DecodeSome();
    if (!piece.ok()) return piece;
    return Counted(*piece);
  }
  absl::StatusOr<bool> any = Fill();
  if (!any.ok()) return any.status();
  absl::string_view piece = pending_;
  consumed_ += piece.size();
  pending_ = {};
  return Counted(piece);
}

absl::StatusOr<absl::string_view> DecompressingReader::Counted(absl::string_view piece) {
  if (piece.size() > max_bytes_ - std::min(produced_, max_bytes_)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name_, ": more than ", DescribeBytes(max_bytes_), " of input",
        codec_ == Codec::kNone ? "" : absl::StrCat(" once decompressed (", codec_name(), ")"),
        ": refused; ", kMaxInputVariable, " raises the limit"));
  }
  produced_ += piece.size();
  return piece;
}

absl::StatusOr<absl::string_view> DecompressingReader::DecodeSome() {
  while (!finished_) {
    absl::StatusOr<bool> any = Fill();
    if (!any.ok()) return any.status();
    const bool at_end = !*any;
    // zlib counts in 32 bits: hand it at most 1 GiB of a large in-memory input at a time.
    const std::size_t given = std::min<std::size_t>(pending_.size(), 1u << 30);
    absl::StatusOr<Decoded> step = codec_ == Codec::kXz     ? DecodeXz(given, at_end)
                                   : codec_ == Codec::kGzip ? DecodeGzip(given, at_end)
                                                            : DecodeZstd(given, at_end);
    if (!step.ok()) return step.status();
    pending_.remove_prefix(step->used);
    consumed_ += step->used;
    if (step->produced > 0) return absl::string_view(out_.data(), step->produced);
    if (!finished_ && at_end && step->used == 0) return StreamError("truncated");
  }
  return absl::string_view();
}

absl::StatusOr<DecompressingReader::Decoded> DecompressingReader::DecodeXz(std::size_t given,
                                                                           bool at_end) {
  lzma_stream& s = state_->xz;
  s.next_in = reinterpret_cast<const std::uint8_t*>(pending_.data());
  s.avail_in = given;
  s.next_out = reinterpret_cast<std::uint8_t*>(out_.data());
  s.avail_out = out_.size();
  const lzma_ret ret = lzma_code(&s, at_end ? LZMA_FINISH : LZMA_RUN);
  const Decoded step{given - s.avail_in, out_.size() - s.avail_out};
  if (ret == LZMA_STREAM_END) {
    finished_ = true;
  } else if (ret != LZMA_OK) {
    consumed_ += step.used;
    return StreamError(ret == LZMA_BUF_ERROR        ? "truncated"
                       : ret == LZMA_MEMLIMIT_ERROR ? "too large to decode within 512 MiB of memory"
                                                    : "corrupt");
  }
  return step;
}

absl::StatusOr<DecompressingReader::Decoded> DecompressingReader::DecodeGzip(std::size_t given,
                                                                             bool at_end) {
  z_stream& s = state_->gz;
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(pending_.data()));
  s.avail_in = static_cast<uInt>(given);
  s.next_out = reinterpret_cast<Bytef*>(out_.data());
  s.avail_out = static_cast<uInt>(out_.size());
  const int ret = inflate(&s, Z_NO_FLUSH);
  const std::size_t used = given - s.avail_in;
  const std::size_t produced = out_.size() - s.avail_out;
  // Taken here, before the next member is looked for.
  pending_.remove_prefix(used);
  consumed_ += used;
  if (ret == Z_STREAM_END) {
    // Concatenated gzip members: another may follow.
    absl::StatusOr<bool> more = Fill();
    if (!more.ok()) return more.status();
    if (!*more) {
      finished_ = true;
    } else if (inflateReset(&s) != Z_OK) {
      return StreamError("corrupt");
    }
  } else if (ret == Z_BUF_ERROR) {
    if (at_end) return StreamError("truncated");
  } else if (ret != Z_OK) {
    return StreamError("corrupt");
  }
  return Decoded{0, produced};
}

absl::StatusOr<DecompressingReader::Decoded> DecompressingReader::DecodeZstd(std::size_t given,
                                                                             bool at_end) {
  ZSTD_inBuffer input{pending_.data(), given, 0};
  ZSTD_outBuffer output{out_.data(), out_.size(), 0};
  if (given > 0 || !at_end) {
    const std::size_t ret = ZSTD_decompressStream(state_->zstd, &output, &input);
    if (ZSTD_isError(ret)) {
      consumed_ += input.pos;
      return absl::DataLossError(
          absl::StrCat(StreamError("corrupt").message(), ": ", ZSTD_getErrorName(ret)));
    }
    state_->zstd_last = ret;
  } else if (state_->zstd_last == 0) {
    finished_ = true;
  } else {
    // Output the decoder still holds comes out with no input; none left means cut off.
    const std::size_t ret = ZSTD_decompressStream(state_->zstd, &output, &input);
    if (ZSTD_isError(ret) || output.pos == 0) return StreamError("truncated");
    state_->zstd_last = ret;
  }
  return Decoded{input.pos, output.pos};
}

absl::StatusOr<std::string> ReadAll(DecompressingReader& reader) {
  std::string out;
  if (absl::string_view(reader.codec_name()) == "none") {
    out.reserve(std::min(reader.total(), reader.max_bytes()));
  }
  while (true) {
    absl::StatusOr<absl::string_view> piece = reader.Next();
    if (!piece.ok()) return piece.status();
    if (piece->empty()) return out;
    out.append(piece->data(), piece->size());
  }
}

absl::StatusOr<std::string> Decompress(std::string data, const std::string& name) {
  std::unique_ptr<DecompressingReader> reader =
      DecompressingReader::FromBytes(std::move(data), name);
  return ReadAll(*reader);
}

absl::StatusOr<std::string> ReadFileDecompressed(const std::string& path) {
  absl::StatusOr<std::unique_ptr<DecompressingReader>> reader =
      DecompressingReader::OpenFile(path);
  if (!reader.ok()) return reader.status();
  return ReadAll(**reader);
}

}  // namespace gpumem::trace
