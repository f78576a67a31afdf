#!/usr/bin/env bash
# Installs packages, builds chorus, and synthesizes speech into demo.wav. With --model DIR it uses
# that checkpoint (e.g. a Qwen3-TTS-12Hz-0.6B-CustomVoice folder); without, it makes a tiny
# random-weight demo model first, whose audio is noise.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build chorus
model=""
if [ "${1:-}" = "--model" ] && [ -n "${2:-}" ]; then model=$2; fi
build/chorus version
if [ -z "$model" ]; then
  echo "demo.sh: no --model given: making a tiny random-weight demo model (its output is noise)"
  model=build/demo-model
  build/chorus make-tiny --family qwen3-tts --variant custom_voice --seed 1 --out "$model"
fi
build/chorus inspect "$model"
speaker_args=()
if build/chorus inspect "$model" | grep -q '^speakers .*ryan'; then speaker_args=(--speaker ryan --language english); fi
build/chorus say --model "$model" --text "${CHORUS_DEMO_TEXT:-Hello! This is chorus, speaking from a C++ engine.}" \
  "${speaker_args[@]}" -o demo.wav
echo "demo.sh: wrote demo.wav"
