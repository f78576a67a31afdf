#!/usr/bin/env bash
# Run here (Debian 12): downloads the Debian packages chorus builds against into .devkit/, so a GPU
# machine without network access (and without these packages) can build chorus: name .devkit in the
# device tool's `carry` and run scripts/device/build.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .devkit
cd .devkit
apt-get download -qq \
  nlohmann-json3-dev libcli11-dev libonig-dev libonig5 libutf8proc-dev libutf8proc2 \
  libsndfile1-dev libsndfile1 libflac12 libvorbis0a libvorbisenc2 libopus0 libogg0 libmpg123-0 libmp3lame0 \
  libsoxr-dev libsoxr0 libkissfft-dev libkissfft-float131 libsentencepiece-dev libsentencepiece0 \
  libprotobuf-lite32 libgtest-dev libgmock-dev pkgconf pkgconf-bin libpkgconf3 2>/dev/null
ls | wc -l
