#!/usr/bin/env bash
# Run here after `ninja -C build-cuda chorus test_gpu`: copies the CUDA build's binaries with the
# shared libraries the GPU machine lacks into .devcarry/gpu, and the reference material the GPU tests
# read into .devcarry/shared (both ignored by git; name them in the device tool's `carry`). The
# CUDA runtime is linked statically; cuBLAS comes from the GPU machine's CUDA installation.
#   PACK_BINARIES=0: the reference material alone (for gpu_tests.sh, which builds on the GPU machine).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-cuda}
dst=.devcarry/gpu
rm -rf "$dst" && mkdir -p "$dst/lib"
if [ "${PACK_BINARIES:-1}" != 0 ]; then
  cp "$build/chorus" "$build/tests/test_gpu" "$dst/"
  strip "$dst/chorus" "$dst/test_gpu"
  # Other builds to compare against in the same run (the stackvariants steps), saved there as
  # chorus_<name> (e.g. chorus_base).
  for other in "$build"/chorus_*; do
    if [ -f "$other" ]; then cp "$other" "$dst/" && strip "$dst/$(basename "$other")"; fi
  done
  # Suites built with planted bugs (run_planted.sh) and other revisions' suites (save_builds.sh
  # SAVE_TESTS=1; the branchtests step), when saved there.
  for suite in "$build"/tests/test_gpu_planted* "$build"/tests/test_gpu_at_*; do
    if [ -f "$suite" ]; then cp "$suite" "$dst/" && strip "$dst/$(basename "$suite")"; fi
  done
  ldd "$build/chorus" "$build/tests/test_gpu" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|libcublas*) ;;
      *) cp -L "$lib" "$dst/lib/" ;;
    esac
  done
fi
ref=/work/shared/reference/qwen3_tts
sh=.devcarry/shared/reference/qwen3_tts
rm -rf .devcarry/shared && mkdir -p "$sh/goldens"
cp "$ref/manifest.json" "$sh/"
cp -r "$ref/models" "$sh/"
cp "$ref"/goldens/gen_*.safetensors "$ref"/goldens/prefill_*.safetensors "$sh/goldens/"
bref=/work/shared/reference/breeze_tts2
bsh=.devcarry/shared/reference/breeze_tts2
mkdir -p "$bsh/goldens"
cp "$bref/manifest.json" "$bsh/"
cp -r "$bref/models" "$bsh/"
cp "$bref"/goldens/gen_*.safetensors "$bref"/goldens/prefill_*.safetensors "$bref"/goldens/text_encoder.safetensors \
  "$bref"/goldens/depth_decoder.safetensors "$bsh/goldens/"
# The device tool carries at most 64 MiB: ship both folders compressed (unpack there with tar xJf).
mkdir -p .devcarry/pack
# -9: a 64 MiB window, so the near-identical binaries (chorus_*, planted suites) are stored once.
rm -f .devcarry/pack/gpu.tar.xz
if [ "${PACK_BINARIES:-1}" != 0 ]; then
  tar cf - -C .devcarry gpu | xz -9 -T2 > .devcarry/pack/gpu.tar.xz
fi
# PACK_SHARED=0 leaves the reference material out (~35 MB; the bench steps do not read it).
rm -f .devcarry/pack/shared.tar.xz
if [ "${PACK_SHARED:-1}" != 0 ]; then
  tar cf - -C .devcarry shared | xz -6 -T2 > .devcarry/pack/shared.tar.xz
fi
du -sh "$dst" .devcarry/shared .devcarry/pack/*
total=$(du -cb .devcarry/pack/*.tar.xz | tail -1 | cut -f1)
if (( total > 64 * 1024 * 1024 )); then
  echo "pack: $((total / 1024 / 1024)) MiB is over the device tool's 64 MiB carry: save fewer builds or suites" \
    "(each stripped binary is ~2.6 MB compressed), or pack with PACK_SHARED=0 for bench-only runs" >&2
  exit 1
fi
