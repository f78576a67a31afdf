// CPU kernel micro-benchmarks: the talker's decode matrix-vector products (memory bound: reported
// as weight bytes streamed per second), prefill products, decode attention and codec convolutions.
//   build-x/bench/bench_kernels --benchmark_filter=Linear
// Arguments: isa (0 portable, 1 avx2, 2 avx512, 3 avx512+vnni), threads, then the shape.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/quant.h"

namespace {

using namespace chorus;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  const auto f = random_floats(n, seed);
  std::vector<uint16_t> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(f[i]);
  return h;
}

ThreadPool* pool_of(int threads) {
  static std::unique_ptr<ThreadPool> pools[9];
  if (threads <= 1) return nullptr;
  if (!pools[threads]) pools[threads] = std::make_unique<ThreadPool>(threads);
  return pools[threads].get();
}

bool select_isa(benchmark::State& state) {
  const cpu::Isa isas[] = {cpu::Isa::kPortable, cpu::Isa::kAvx2, cpu::Isa::kAvx512, cpu::Isa::kAvx512Vnni};
  const auto isa = isas[std::clamp<int64_t>(state.range(0), 0, 3)];
  if (!cpu::set_isa(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return false;
  }
  return true;
}

// isa, threads, M, N, K; bf16 weights.
void BM_LinearBf16(benchmark::State& state) {
  if (!select_isa(state)) return;
  const int threads = static_cast<int>(state.range(1));
  const int64_t M = state.range(2), N = state.range(3), K = state.range(4);
  const auto w = random_bf16(static_cast<size_t>(N * K), 1);
  const auto x = random_floats(static_cast<size_t>(M * K), 2);
  std::vector<float> y(static_cast<size_t>(M * N));
  const cpu::MatrixRef wr{DType::kBF16, w.data(), N, K};
  for (auto _ : state) {
    cpu::linear(x.data(), M, wr, nullptr, y.data(), pool_of(threads));
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_GB/s"] = benchmark::Counter(
      static_cast<double>(N * K * 2) * state.iterations(), benchmark::Counter::kIsRate,
      benchmark::Counter::kIs1000);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * M * N * K * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearBf16)
    ->ArgNames({"isa", "thr", "M", "N", "K"})
    // Qwen3-TTS 0.6B talker decode: q (1024→2048), gate/up (1024→3072), down (3072→1024).
    ->Args({1, 1, 1, 2048, 1024})->Args({1, 1, 1, 3072, 1024})->Args({1, 1, 1, 1024, 3072})
    ->Args({1, 2, 1, 2048, 1024})->Args({1, 2, 1, 3072, 1024})->Args({1, 2, 1, 1024, 3072})
    // 1.7B talker decode: gate/up (2048→6144), down (6144→2048).
    ->Args({1, 1, 1, 6144, 2048})->Args({1, 2, 1, 6144, 2048})->Args({1, 2, 1, 2048, 6144})
    ->Args({0, 1, 1, 3072, 1024})->Args({0, 2, 1, 3072, 1024})
    // Prefill of a 64-token prompt.
    ->Args({1, 1, 64, 3072, 1024})->Args({1, 2, 64, 3072, 1024})->Args({0, 2, 64, 3072, 1024})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

// isa, threads, N, K: M = 1 over a rotation of weight matrices totalling 128 MB, so every call
// streams its weights from DRAM as decode does (a single matrix would sit in the 32 MB L3).
void BM_LinearBf16Decode(benchmark::State& state) {
  if (!select_isa(state)) return;
  const int threads = static_cast<int>(state.range(1));
  const int64_t N = state.range(2), K = state.range(3);
  const size_t count = static_cast<size_t>((128 << 20) / (N * K * 2) + 1);
  std::vector<std::vector<uint16_t>> ws;
  for (size_t i = 0; i < count; ++i) ws.push_back(random_bf16(static_cast<size_t>(N * K), 10 + i));
  const auto x = random_floats(static_cast<size_t>(K), 2);
  std::vector<float> y(static_cast<size_t>(N));
  size_t i = 0;
  for (auto _ : state) {
    const cpu::MatrixRef wr{DType::kBF16, ws[i].data(), N, K};
    cpu::linear(x.data(), 1, wr, nullptr, y.data(), pool_of(threads));
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % count;
  }
  state.counters["weight_GB/s"] = benchmark::Counter(
      static_cast<double>(N * K * 2) * state.iterations(), benchmark::Counter::kIsRate,
      benchmark::Counter::kIs1000);
}
BENCHMARK(BM_LinearBf16Decode)
    ->ArgNames({"isa", "thr", "N", "K"})
    ->Args({1, 1, 3072, 1024})->Args({1, 2, 3072, 1024})->Args({1, 2, 1024, 3072})
    ->Args({1, 2, 6144, 2048})->Args({0, 2, 3072, 1024})->Args({2, 1, 3072, 1024})->Args({2, 2, 3072, 1024})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

// isa, threads, format (1 int8, 2 int4), M, N, K: the decode product of BM_LinearBf16Decode with
// quantised weights, for M rows at once (the streams of a batched step share each weight read);
// weight_GB/s counts their bytes (codes and scales), GFLOP/s the rows' products.
void BM_LinearQuantDecode(benchmark::State& state) {
  if (!select_isa(state)) return;
  const int threads = static_cast<int>(state.range(1));
  const auto format = state.range(2) == 1 ? cpu::WeightFormat::kInt8 : cpu::WeightFormat::kInt4;
  const int64_t M = state.range(3), N = state.range(4), K = state.range(5);
  const size_t bytes_per = static_cast<size_t>(N * K * (format == cpu::WeightFormat::kInt8 ? 1 : 0.5));
  const size_t count = (128 << 20) / bytes_per + 1;
  std::vector<cpu::QuantMatrix> ws;
  for (size_t i = 0; i < count; ++i) {
    const auto h = random_bf16(static_cast<size_t>(N * K), 10 + static_cast<uint32_t>(i));
    auto q = cpu::QuantMatrix::quantize(cpu::MatrixRef{DType::kBF16, h.data(), N, K}, format);
    if (!q.ok()) {
      state.SkipWithError("quantize failed");
      return;
    }
    ws.push_back(std::move(*q));
  }
  const auto x = random_floats(static_cast<size_t>(M * K), 2);
  std::vector<float> y(static_cast<size_t>(M * N));
  size_t i = 0;
  for (auto _ : state) {
    cpu::linear(x.data(), M, ws[i], nullptr, y.data(), pool_of(threads));
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % count;
  }
  state.counters["weight_GB/s"] = benchmark::Counter(static_cast<double>(ws[0].bytes()) * state.iterations(),
                                                     benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * M * N * K * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearQuantDecode)
    ->ArgNames({"isa", "thr", "fmt", "M", "N", "K"})
    ->Args({2, 1, 1, 1, 3072, 1024})->Args({2, 1, 2, 1, 3072, 1024})->Args({3, 1, 2, 1, 3072, 1024})
    ->Args({2, 2, 1, 1, 3072, 1024})->Args({2, 2, 2, 1, 3072, 1024})->Args({3, 2, 2, 1, 3072, 1024})
    ->Args({0, 1, 2, 1, 3072, 1024})
    ->Args({2, 2, 1, 4, 3072, 1024})->Args({3, 2, 2, 4, 3072, 1024})->Args({2, 1, 1, 4, 3072, 1024})
    ->Args({3, 1, 2, 4, 3072, 1024})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

// Baseline for the decode products: plain reading of 128 MB (integer sum, which the compiler
// vectorises) shows the memory bandwidth one thread gets on this machine.
void BM_MemoryReadBaseline(benchmark::State& state) {
  std::vector<uint64_t> buf((128 << 20) / 8, 1);
  for (auto _ : state) {
    uint64_t s = 0;
    for (uint64_t v : buf) s += v;
    benchmark::DoNotOptimize(s);
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(buf.size() * 8) * state.iterations(),
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_MemoryReadBaseline)->UseRealTime()->Unit(benchmark::kMicrosecond);

// isa, threads, Tk: one decode step of the talker's attention (16 q heads, 8 kv heads of 128).
void BM_AttentionDecode(benchmark::State& state) {
  if (!select_isa(state)) return;
  const int threads = static_cast<int>(state.range(1));
  const int64_t Tk = state.range(2), Hq = 16, Hkv = 8, D = 128;
  const auto q = random_floats(static_cast<size_t>(Hq * D), 3);
  const auto k = random_floats(static_cast<size_t>(Tk * Hkv * D), 4);
  const auto v = random_floats(static_cast<size_t>(Tk * Hkv * D), 5);
  std::vector<float> out(static_cast<size_t>(Hq * D));
  for (auto _ : state) {
    cpu::attention(q.data(), 1, Hq, k.data(), v.data(), Tk, Hkv, D, Tk - 1, 0, 0.088f, out.data(),
                   pool_of(threads));
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK(BM_AttentionDecode)
    ->ArgNames({"isa", "thr", "Tk"})
    ->Args({1, 1, 1000})->Args({1, 2, 1000})->Args({0, 2, 1000})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

// isa, threads, C (in = out), T, K: a codec decoder residual-unit conv (bf16 weights).
void BM_Conv1d(benchmark::State& state) {
  if (!select_isa(state)) return;
  const int threads = static_cast<int>(state.range(1));
  const int64_t C = state.range(2), T = state.range(3), K = state.range(4);
  const auto w = random_bf16(static_cast<size_t>(C * C * K), 6);
  const auto x = random_floats(static_cast<size_t>(C * (T + K - 1)), 7);
  std::vector<float> y(static_cast<size_t>(C * T));
  const cpu::MatrixRef wr{DType::kBF16, w.data(), C, C * K};
  for (auto _ : state) {
    cpu::conv1d(x.data(), C, T + K - 1, wr, K, nullptr, 1, 1, 1, y.data(), pool_of(threads));
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * C * C * K * T * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Conv1d)
    ->ArgNames({"isa", "thr", "C", "T", "K"})
    ->Args({1, 1, 96, 4800, 7})->Args({1, 2, 96, 4800, 7})->Args({1, 2, 768, 200, 7})
    ->Args({0, 2, 96, 4800, 7})->Args({2, 1, 96, 4800, 7})->Args({2, 2, 768, 200, 7})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

// isa, threads, Cin, Cout, T, stride: a codec decoder upsampling block (K = 2·stride, bf16).
void BM_ConvTranspose1d(benchmark::State& state) {
  if (!select_isa(state)) return;
  const int threads = static_cast<int>(state.range(1));
  const int64_t Cin = state.range(2), Cout = state.range(3), T = state.range(4);
  const int64_t s = state.range(5), K = 2 * s;
  const auto w = random_bf16(static_cast<size_t>(Cin * Cout * K), 8);
  const auto x = random_floats(static_cast<size_t>(Cin * T), 9);
  std::vector<float> y(static_cast<size_t>(Cout * ((T - 1) * s + K)));
  const cpu::MatrixRef wr{DType::kBF16, w.data(), Cin, Cout * K};
  for (auto _ : state) {
    cpu::conv_transpose1d(x.data(), Cin, T, wr, Cout, K, nullptr, s, 1, y.data(),
                          pool_of(threads));
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * Cin * Cout * K * T * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ConvTranspose1d)
    ->ArgNames({"isa", "thr", "Cin", "Cout", "T", "s"})
    ->Args({1, 1, 1536, 768, 100, 8})->Args({1, 2, 1536, 768, 100, 8})
    ->Args({0, 2, 1536, 768, 100, 8})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
