#include "tools/pprof/gzip.h"

#include <zlib.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpumem::pprof {

absl::StatusOr<std::string> Gzip(absl::string_view data) {
  // One deflate call: zlib counts its buffers in 32 bits.
  if (data.size() > (1u << 31)) return absl::InvalidArgumentError("gzip: more than 2 GiB in one piece");
  z_stream z{};
  // 15 window bits, +16: a gzip header and trailer instead of zlib's.
  if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return absl::InternalError("gzip: deflateInit2 failed");
  }
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) return absl::InternalError(absl::StrCat("gzip: deflate returned ", rc));
  return out;
}

}  // namespace gpumem::pprof
