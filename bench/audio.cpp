// Micro-benchmarks of the server's per-chunk audio work: one 80 ms chunk (1,920 samples at 24 kHz,
// what the codec makes per frame) through a streaming encoder of each response format. The server
// runs this for every stream's every frame, so its cost per chunk times the streams of a step is
// what delivery adds to that step.
//   ./build/bench/bench_audio
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "audio/stream_encoder.h"

namespace {

using chorus::audio::StreamEncoder;
using chorus::audio::StreamFormat;

// A voiced-like signal (a few harmonics and a little noise), different in every chunk.
std::vector<float> signal_chunks(int chunks) {
  std::vector<float> s(static_cast<size_t>(chunks) * 1920);
  uint32_t noise = 12345;
  for (size_t i = 0; i < s.size(); ++i) {
    const double t = static_cast<double>(i) / 24000.0;
    noise = noise * 1664525u + 1013904223u;
    const double hiss = static_cast<double>(noise >> 8) / (1 << 24) - 0.5;
    s[i] = static_cast<float>(0.3 * std::sin(2 * M_PI * 140 * t) + 0.15 * std::sin(2 * M_PI * 280 * t) +
                              0.05 * std::sin(2 * M_PI * 1120 * t) + 0.01 * hiss);
  }
  return s;
}

void BM_StreamEncoderChunk(benchmark::State& state) {
  const auto format = static_cast<StreamFormat>(state.range(0));
  constexpr int kChunks = 64;
  const std::vector<float> s = signal_chunks(kChunks);
  size_t bytes = 0;
  auto made = StreamEncoder::create(format, 24000, [&](const uint8_t*, size_t n) {
    bytes += n;
    return chorus::ok_status();
  });
  if (!made.ok()) {
    state.SkipWithError("encoder");
    return;
  }
  auto enc = std::move(made).value();
  int i = 0;
  for (auto _ : state) {
    if (!enc->write(s.data() + static_cast<size_t>(i % kChunks) * 1920, 1920).ok()) {
      state.SkipWithError("write");
      return;
    }
    ++i;
  }
  state.SetLabel(chorus::audio::stream_format_name(format));
  state.counters["bytes_per_chunk"] = static_cast<double>(bytes) / std::max(i, 1);
}
BENCHMARK(BM_StreamEncoderChunk)
    ->Arg(static_cast<int>(StreamFormat::kPcm))
    ->Arg(static_cast<int>(StreamFormat::kWav))
    ->Arg(static_cast<int>(StreamFormat::kFlac))
    ->Arg(static_cast<int>(StreamFormat::kMp3))
    ->Arg(static_cast<int>(StreamFormat::kOpus))
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
