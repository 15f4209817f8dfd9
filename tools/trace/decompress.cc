#include "tools/trace/decompress.h"

#include <lzma.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace gpumem::trace {
namespace {

bool StartsWith(const std::string& data, const char* magic, std::size_t n) {
  return data.size() >= n && std::memcmp(data.data(), magic, n) == 0;
}

absl::StatusOr<std::string> Unxz(const std::string& in, const std::string& name) {
  lzma_stream strm = LZMA_STREAM_INIT;
  if (lzma_stream_decoder(&strm, UINT64_MAX, LZMA_CONCATENATED) != LZMA_OK) {
    return absl::InternalError(absl::StrCat(name, ": cannot start the xz decoder"));
  }
  std::string out;
  out.resize(std::max<std::size_t>(in.size() * 8, 1 << 16));
  strm.next_in = reinterpret_cast<const uint8_t*>(in.data());
  strm.avail_in = in.size();
  lzma_ret ret = LZMA_OK;
  while (true) {
    if (strm.total_out == out.size()) out.resize(out.size() * 2);
    strm.next_out = reinterpret_cast<uint8_t*>(out.data()) + strm.total_out;
    strm.avail_out = out.size() - strm.total_out;
    ret = lzma_code(&strm, LZMA_FINISH);
    if (ret != LZMA_OK) break;
  }
  std::size_t produced = strm.total_out;
  std::uint64_t consumed = strm.total_in;
  lzma_end(&strm);
  if (ret != LZMA_STREAM_END) {
    const char* why = ret == LZMA_BUF_ERROR ? "truncated" : "corrupt";
    return absl::DataLossError(
        absl::StrCat(name, ": xz stream is ", why, " at compressed byte ", consumed));
  }
  out.resize(produced);
  return out;
}

absl::StatusOr<std::string> Ungzip(const std::string& in, const std::string& name) {
  z_stream strm{};
  if (inflateInit2(&strm, 15 + 32) != Z_OK) {
    return absl::InternalError(absl::StrCat(name, ": cannot start the gzip decoder"));
  }
  std::string out;
  out.resize(std::max<std::size_t>(in.size() * 8, 1 << 16));
  strm.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  strm.avail_in = static_cast<uInt>(in.size());
  int ret = Z_OK;
  while (true) {
    if (strm.total_out == out.size()) out.resize(out.size() * 2);
    strm.next_out = reinterpret_cast<Bytef*>(out.data()) + strm.total_out;
    strm.avail_out = static_cast<uInt>(out.size() - strm.total_out);
    ret = inflate(&strm, Z_NO_FLUSH);
    if (ret == Z_STREAM_END && strm.avail_in > 0) {
      // Concatenated gzip members: keep going.
      if (inflateReset(&strm) != Z_OK) break;
      continue;
    }
    if (ret != Z_OK) break;
  }
  std::size_t produced = strm.total_out;
  std::size_t consumed = in.size() - strm.avail_in;
  inflateEnd(&strm);
  if (ret != Z_STREAM_END) {
    const char* why = ret == Z_BUF_ERROR ? "truncated" : "corrupt";
    return absl::DataLossError(
        absl::StrCat(name, ": gzip stream is ", why, " at compressed byte ", consumed));
  }
  out.resize(produced);
  return out;
}

absl::StatusOr<std::string> Unzstd(const std::string& in, const std::string& name) {
  ZSTD_DCtx* ctx = ZSTD_createDCtx();
  std::string out;
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  std::size_t last = 1;
  std::string chunk(ZSTD_DStreamOutSize(), '\0');
  while (input.pos < input.size) {
    ZSTD_outBuffer output{chunk.data(), chunk.size(), 0};
    last = ZSTD_decompressStream(ctx, &output, &input);
    if (ZSTD_isError(last)) {
      ZSTD_freeDCtx(ctx);
      return absl::DataLossError(absl::StrCat(name, ": zstd stream is corrupt at compressed byte ",
                                              input.pos, ": ", ZSTD_getErrorName(last)));
    }
    out.append(chunk.data(), output.pos);
  }
  ZSTD_freeDCtx(ctx);
  if (last != 0) {
    return absl::DataLossError(absl::StrCat(name, ": zstd stream is truncated at compressed byte ",
                                            input.pos));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> Decompress(std::string data, const std::string& name) {
  if (StartsWith(data, "\xFD" "7zXZ\x00", 6)) return Unxz(data, name);
  if (StartsWith(data, "\x1F\x8B", 2)) return Ungzip(data, name);
  if (StartsWith(data, "\x28\xB5\x2F\xFD", 4)) return Unzstd(data, name);
  return data;
}

absl::StatusOr<std::string> ReadFileDecompressed(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  // One read into a buffer of the file's size: traces run to gigabytes.
  std::string bytes;
  char chunk[1 << 16];
  if (std::fseek(file, 0, SEEK_END) == 0) {
    long size = std::ftell(file);
    if (size > 0) bytes.reserve(static_cast<std::size_t>(size));
    std::rewind(file);
  }
  std::size_t n;
  while ((n = std::fread(chunk, 1, sizeof chunk, file)) > 0) bytes.append(chunk, n);
  bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) return absl::DataLossError(absl::StrCat(path, ": read error"));
  return Decompress(std::move(bytes), path);
}

}  // namespace gpumem::trace
