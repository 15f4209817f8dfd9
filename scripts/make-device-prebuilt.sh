#!/usr/bin/env bash
# Copies this machine's (Debian 12) build dependencies that the GPU machine lacks (Abseil,
# GoogleTest, Google Benchmark, nlohmann-json, CLI11, zstd, xz, zlib: headers, libraries
# and CMake package files) into third_party/prebuilt/usr, keeping the /usr layout so the
# packages' CMake files find their files relative to themselves. That folder is ignored by
# git; pass it to the device tool with carry: ["third_party/prebuilt"]. tests/gpu/run.sh
# puts it on CMAKE_PREFIX_PATH and LD_LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=third_party/prebuilt/usr
lib=lib/x86_64-linux-gnu
rm -rf third_party/prebuilt
mkdir -p "$dest/include" "$dest/$lib/cmake" "$dest/share/cmake"

for h in absl gtest gmock benchmark nlohmann CLI lzma lzma.h zstd.h zstd_errors.h zdict.h \
         zlib.h zconf.h; do
  cp -a "/usr/include/$h" "$dest/include/"
done
for pattern in 'libabsl_*.so*' 'libgtest*.a' 'libgmock*.a' 'libbenchmark*' 'libzstd.so*' 'libzstd.a' \
               'liblzma.so*' 'libz.so*'; do
  # shellcheck disable=SC2086
  cp -a /usr/$lib/$pattern "$dest/$lib/"
done
# Debian links some .so names to absolute paths (/lib/...): make them relative.
for link in $(find "$dest/$lib" -maxdepth 1 -type l -lname '/*'); do
  ln -sfn "$(basename "$(readlink "$link")")" "$link"
done
for pkg in absl GTest zstd benchmark; do
  cp -a "/usr/$lib/cmake/$pkg" "$dest/$lib/cmake/"
done
for pkg in nlohmann_json CLI11; do
  cp -a "/usr/share/cmake/$pkg" "$dest/share/cmake/"
done
du -sh third_party/prebuilt
