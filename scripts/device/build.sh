#!/usr/bin/env bash
# Run on the GPU machine from the repo root (with .devkit carried): unpacks the Debian packages into
# /tmp/sysroot and builds chorus with CUDA into build-gpu/. Prints the environment line to source
# for running the binaries:  source /tmp/sysroot/env.sh
set -euo pipefail
root=/tmp/sysroot
if [ ! -f $root/.done ]; then
  mkdir -p $root
  for f in .devkit/*.deb; do dpkg-deb -x "$f" $root; done
  touch $root/.done
fi
lib=$root/usr/lib/x86_64-linux-gnu
cat > $root/env.sh <<ENV
export PATH=$root/usr/bin:\$PATH
export LD_LIBRARY_PATH=$lib:\${LD_LIBRARY_PATH:-}
export PKG_CONFIG_PATH=$lib/pkgconfig:$root/usr/share/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$root
export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$root/usr/share/pkgconfig
ENV
# shellcheck disable=SC1091
source $root/env.sh
ln -sf pkgconf $root/usr/bin/pkg-config
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCHORUS_CUDA=ON -DCHORUS_WERROR=OFF \
  -DCMAKE_PREFIX_PATH="$root/usr;$lib/cmake" -DPKG_CONFIG_EXECUTABLE=$root/usr/bin/pkgconf \
  -DCHORUS_SHARED_DIR="$(pwd)/.devcarry/shared" "$@" >/dev/null
# shellcheck disable=SC2086  # a space-separated target list
ninja -C build-gpu ${CHORUS_TARGETS:-all}
