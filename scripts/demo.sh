#!/usr/bin/env bash
# Installs packages, builds chorus, synthesizes speech into demo.wav, and installs the Python
# package into .venv. With --model DIR it uses
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
# The Python package (import chorus), offline, into .venv with Debian's numpy and pybind11.
/usr/bin/python3 -m venv --system-site-packages .venv
CHORUS_BUILD_DIR="$(pwd)/build" .venv/bin/pip install -q --no-build-isolation ./python
.venv/bin/python -c "import chorus; print('demo.sh: Python package in .venv:', chorus.build_info())"
echo "demo.sh: next: build/chorus serve --model $model  (then open the printed URL for the playground)"
