// Every CUDA kernel against the CPU backend (runtime/cpu, sampling/) on fresh random inputs. Outputs
// are poisoned with NaN first, so an unwritten element fails. Tolerances: f32 kernels agree with the
// CPU to summation-order rounding (relative 2e-5 of the largest output); the tensor-core linear
// path splits inputs into two bf16 parts (2⁻¹⁷ relative), so 2e-4. The sampler's are in
// sampler_test.cpp.
#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "gpu_test_util.h"
#include "sampling/rng.h"
#include "sampling/sampler.h"

namespace chorus::gpu_test {
namespace {

std::vector<float> cpu_rms_norm(const std::vector<float>& x, const std::vector<float>& g, int64_t rows, int64_t dim) {
  std::vector<float> y(x.size());
  cpu::rms_norm(x.data(), g.data(), y.data(), rows, dim, 1e-6f);
  return y;
}

// Long rows (K >= 2048: the single-row kernel's whole-row prefetch, and from 4096 its deep loads)
// give bit for bit what the multi-row kernel gives for the same row (the same per-feature order;
// without the RMS prologue, whose sum the two kernels reduce differently), for every epilogue, and
// match the CPU. K = 3000 and 4104 are not multiples of 256, so lanes leave the prefetched chunks
// and the deep loop at different chunks.
TEST(GpuLinear, LongSingleRowsEqualTheMultiRowKernelBitForBit) {
  REQUIRE_GPU();
  std::mt19937 rng(12);
  for (int64_t K : {2048, 3000, 4096, 4104, 6144, 8192}) {
    SCOPED_TRACE(testing::Message() << "K " << K);
    const int64_t N = 72;
    const auto x = random_vec(rng, static_cast<size_t>(2 * K));
    const auto dx = to_device(x);
    const Bf16Matrix w = random_bf16(rng, N, K, 1.0f / std::sqrt(static_cast<float>(K)));
    const Bf16Matrix u = random_bf16(rng, N, K, 1.0f / std::sqrt(static_cast<float>(K)));
    for (const auto epilogue : {cuda::Epilogue::kStore, cuda::Epilogue::kAdd, cuda::Epilogue::kSwiGlu}) {
      const auto y0 = random_vec(rng, static_cast<size_t>(2 * N));
      auto one = to_device(y0), two = to_device(y0);  // kAdd adds onto them
      for (int64_t M : {1, 2}) {
        cuda::LinearArgs a;
        a.x = dx.as<float>();
        a.ldx = K;
        a.M = M;
        a.epilogue = epilogue;
        float* y = (M == 1 ? one : two).as<float>();
        a.out[0] = {w.gpu(), nullptr, y, N};
        if (epilogue == cuda::Epilogue::kSwiGlu) {
          a.out[1] = {u.gpu(), nullptr, y, N};
          a.outputs = 2;
        }
        ASSERT_TRUE(cuda::linear(a, nullptr, nullptr, cuda::kLinearGemv).ok());
      }
      const auto single = to_host<float>(one, static_cast<size_t>(N));
      const auto multi = to_host<float>(two, static_cast<size_t>(N));
      EXPECT_EQ(single, multi) << "epilogue " << static_cast<int>(epilogue);
      if (epilogue == cuda::Epilogue::kStore) {
        std::vector<float> want(static_cast<size_t>(N));
        cpu::linear(x.data(), 1, w.cpu(), nullptr, want.data());
        EXPECT_LT(rel_err(single, want), 2e-5);
      }
    }
  }
}

// The final norm fused into a head's launch (LinearArgs::round_outputs = false): the input normed as
// the stack's mode norms it, the logits left in f32. Bit for bit what the two launches it replaces
// give (rms_norm, then the head on the normed row in f32), on the single-row kernel with one and two
// features per warp; the multi-row kernel (two rows) within summation-order rounding of them.
TEST(GpuLinear, NormedHeadWithF32OutputsEqualsTheNormThenTheHead) {
  REQUIRE_GPU();
  std::mt19937 rng(19);
  const int64_t K = 1024;
  for (const bool bf16 : {false, true}) {
    for (const int64_t N : {2064, 300}) {
      SCOPED_TRACE(testing::Message() << "N " << N << (bf16 ? ", bf16" : ", f32"));
      std::vector<float> x = random_vec(rng, static_cast<size_t>(2 * K), -2.0f, 2.0f);
      if (bf16)
        for (float& v : x) v = round_to_bf16(v);
      const auto g = random_vec(rng, static_cast<size_t>(K), 0.5f, 1.5f);
      const auto dx = to_device(x), dg = to_device(g);
      const Bf16Matrix w = random_bf16(rng, N, K, 1.0f / 32.0f);
      const auto run = [&](int64_t M, bool fused, bool round) {
        auto y = poisoned(static_cast<size_t>(M * N)), normed = poisoned(static_cast<size_t>(M * K));
        cuda::LinearArgs a;
        a.x = dx.as<float>();
        a.ldx = K;
        a.M = M;
        a.out[0] = {w.gpu(), nullptr, y.as<float>(), N};
        if (fused) {
          a.norm_weight = dg.as<float>();
          a.bf16 = bf16;
          a.round_outputs = round;
        } else {
          EXPECT_TRUE(cuda::rms_norm(dx.as<float>(), dg.as<float>(), normed.as<float>(), M, K, 1e-6f, nullptr, bf16).ok());
          a.x = normed.as<float>();
        }
        const Status st = cuda::linear(a, nullptr, nullptr, cuda::kLinearGemv);
        EXPECT_TRUE(st.ok()) << st.error().to_string();
        return to_host<float>(y, static_cast<size_t>(M * N));
      };
      const auto want = run(1, false, true);
      const auto got = run(1, true, false);
      EXPECT_EQ(got, want);
      EXPECT_LT(rel_err(run(2, true, false), run(2, false, true)), 1e-6);
      if (bf16) {  // non-vacuity: the outputs are not bf16 values, and rounding them changes them
        EXPECT_TRUE(std::any_of(got.begin(), got.end(), [](float v) { return v != round_to_bf16(v); }));
        EXPECT_NE(run(1, true, true), got);
      }
    }
  }
  // Unrounded outputs with a residual add: refused (the same launch with kStore runs).
  const Bf16Matrix w = random_bf16(rng, 64, K, 1.0f / 32.0f);
  const auto dx = to_device(random_vec(rng, static_cast<size_t>(K)));
  auto y = to_device(std::vector<float>(64, 0.0f));
  cuda::LinearArgs a;
  a.x = dx.as<float>();
  a.ldx = K;
  a.M = 1;
  a.out[0] = {w.gpu(), nullptr, y.as<float>(), 64};
  a.bf16 = true;
  a.round_outputs = false;
  EXPECT_TRUE(cuda::linear(a, nullptr, nullptr, cuda::kLinearGemv).ok());
  a.epilogue = cuda::Epilogue::kAdd;
  EXPECT_FALSE(cuda::linear(a, nullptr, nullptr, cuda::kLinearGemv).ok());
}

TEST(GpuLinear, EveryEpiloguePathAndShapeMatchesTheCpu) {
  REQUIRE_GPU();
  std::mt19937 rng(11);
  auto ws = cuda::LinearWorkspace::create(64, 2048, 512);
  ASSERT_TRUE(ws.ok()) << ws.error().to_string();
  int checked = 0;
  for (int path : {cuda::kLinearGemv, cuda::kLinearTensor, cuda::kLinearAuto})
    for (int64_t M : {1, 2, 3, 5, 8, 13, 16, 17, 40})
      for (int64_t K : {1024, 2048, 40, 36}) {
        SCOPED_TRACE(testing::Message() << "path " << path << " M " << M << " K " << K);
        const int64_t N[3] = {96, 32, 40};
        const auto x = random_vec(rng, static_cast<size_t>(M * K));
        const auto g = random_vec(rng, static_cast<size_t>(K), 0.5f, 1.5f);
        const auto dx = to_device(x), dg = to_device(g);
        const double tol = path == cuda::kLinearTensor || (path == cuda::kLinearAuto && M > cuda::kGemvMaxRows) ? 2e-4 : 2e-5;
        Bf16Matrix w[3];
        std::vector<float> bias[3];
        cuda::DeviceBuffer dbias[3];
        for (int i = 0; i < 3; ++i) {
          w[i] = random_bf16(rng, N[i], K, 1.0f / std::sqrt(static_cast<float>(K)));
          bias[i] = random_vec(rng, static_cast<size_t>(N[i]));
          dbias[i] = to_device(bias[i]);
        }
        const auto xn = cpu_rms_norm(x, g, M, K);
        // kStore, three outputs, RMS-norm prologue and bias.
        {
          cuda::DeviceBuffer dy[3];
          cuda::LinearArgs a;
          a.x = dx.as<float>();
          a.ldx = K;
          a.M = M;
          a.norm_weight = dg.as<float>();
          a.outputs = 3;
          for (int i = 0; i < 3; ++i) {
            dy[i] = poisoned(static_cast<size_t>(M * N[i]));
            a.out[i] = {w[i].gpu(), dbias[i].as<float>(), dy[i].as<float>(), N[i]};
          }
          ASSERT_TRUE(cuda::linear(a, &*ws, nullptr, path).ok());
          for (int i = 0; i < 3; ++i) {
            std::vector<float> want(static_cast<size_t>(M * N[i]));
            cpu::linear(xn.data(), M, w[i].cpu(), bias[i].data(), want.data());
            EXPECT_LT(rel_err(to_host<float>(dy[i], want.size()), want), tol) << "output " << i;
          }
        }
        // kAdd (residual), no norm.
        {
          const auto y0 = random_vec(rng, static_cast<size_t>(M * N[0]));
          auto dy = to_device(y0);
          cuda::LinearArgs a;
          a.x = dx.as<float>();
          a.ldx = K;
          a.M = M;
          a.out[0] = {w[0].gpu(), nullptr, dy.as<float>(), N[0]};
          a.epilogue = cuda::Epilogue::kAdd;
          ASSERT_TRUE(cuda::linear(a, &*ws, nullptr, path).ok());
          std::vector<float> want(y0.size());
          cpu::linear(x.data(), M, w[0].cpu(), nullptr, want.data());
          for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
          EXPECT_LT(rel_err(to_host<float>(dy, want.size()), want), tol) << "residual add";
        }
        // kSwiGlu with norm: outputs 1 and 2 have equal shapes? use 1 and a fresh one of N[1] rows.
        {
          Bf16Matrix up = random_bf16(rng, N[1], K, 1.0f / std::sqrt(static_cast<float>(K)));
          auto dy = poisoned(static_cast<size_t>(M * N[1]));
          cuda::LinearArgs a;
          a.x = dx.as<float>();
          a.ldx = K;
          a.M = M;
          a.norm_weight = dg.as<float>();
          a.out[0] = {w[1].gpu(), nullptr, dy.as<float>(), N[1]};
          a.out[1] = {up.gpu(), nullptr, dy.as<float>(), N[1]};
          a.outputs = 2;
          a.epilogue = cuda::Epilogue::kSwiGlu;
          ASSERT_TRUE(cuda::linear(a, &*ws, nullptr, path).ok());
          std::vector<float> gate(static_cast<size_t>(M * N[1])), upv(gate.size()), want(gate.size());
          cpu::linear(xn.data(), M, w[1].cpu(), nullptr, gate.data());
          cpu::linear(xn.data(), M, up.cpu(), nullptr, upv.data());
          cpu::silu_mul(gate.data(), upv.data(), want.data(), static_cast<int64_t>(want.size()));
          EXPECT_LT(rel_err(to_host<float>(dy, want.size()), want), tol) << "swiglu";
        }
        ++checked;
      }
  EXPECT_EQ(checked, 3 * 9 * 4);
}

// A row's result must not depend on the other rows of the call (matrix-vector path).
TEST(GpuLinear, GemvRowsAreIndependentOfTheBatch) {
  REQUIRE_GPU();
  std::mt19937 rng(12);
  const int64_t K = 1024, N = 256, M = 13;
  const auto x = random_vec(rng, static_cast<size_t>(M * K));
  const Bf16Matrix w = random_bf16(rng, N, K, 0.03f);
  const auto dx = to_device(x);
  auto all = poisoned(static_cast<size_t>(M * N));
  cuda::LinearArgs a;
  a.x = dx.as<float>();
  a.ldx = K;
  a.M = M;
  a.out[0] = {w.gpu(), nullptr, all.as<float>(), N};
  ASSERT_TRUE(cuda::linear(a, nullptr, nullptr, cuda::kLinearGemv).ok());
  const auto y_all = to_host<float>(all, static_cast<size_t>(M * N));
  for (int64_t m : {0, 6, 12}) {
    auto one = poisoned(static_cast<size_t>(N));
    a.x = dx.as<float>() + m * K;
    a.M = 1;
    a.out[0].y = one.as<float>();
    ASSERT_TRUE(cuda::linear(a, nullptr, nullptr, cuda::kLinearGemv).ok());
    const auto y1 = to_host<float>(one, static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) ASSERT_EQ(y1[n], y_all[m * N + n]) << "row " << m << " feature " << n;
  }
}

TEST(GpuPointwise, RmsNormSiluMulEmbeddingMatchTheCpu) {
  REQUIRE_GPU();
  std::mt19937 rng(13);
  const int64_t rows = 7, dim = 1000;
  const auto x = random_vec(rng, rows * dim, -3.0f, 3.0f), g = random_vec(rng, dim, 0.5f, 1.5f);
  const auto dx = to_device(x), dg = to_device(g);
  auto dy = poisoned(rows * dim);
  ASSERT_TRUE(cuda::rms_norm(dx.as<float>(), dg.as<float>(), dy.as<float>(), rows, dim, 1e-6f, nullptr).ok());
  EXPECT_LT(rel_err(to_host<float>(dy, rows * dim), cpu_rms_norm(x, g, rows, dim)), 1e-6);

  const auto u = random_vec(rng, rows * dim, -3.0f, 3.0f);
  const auto du = to_device(u);
  auto dz = poisoned(rows * dim);
  ASSERT_TRUE(cuda::silu_mul(dx.as<float>(), du.as<float>(), dz.as<float>(), rows * dim, nullptr).ok());
  std::vector<float> want(rows * dim);
  cpu::silu_mul(x.data(), u.data(), want.data(), rows * dim);
  EXPECT_LT(rel_err(to_host<float>(dz, rows * dim), want), 1e-6);

  const Bf16Matrix table = random_bf16(rng, 50, 64, 1.0f);
  const std::vector<int32_t> ids = {3, 49, 0, 17, 17, -1, 50};  // the last two are out of range: zero rows
  const auto dids = to_device(ids);
  auto de = poisoned(ids.size() * 64);
  ASSERT_TRUE(cuda::embedding(table.gpu(), dids.as<int32_t>(), static_cast<int64_t>(ids.size()), de.as<float>(), nullptr).ok());
  std::vector<float> we(ids.size() * 64);
  cpu::embedding(table.cpu(), ids.data(), static_cast<int64_t>(ids.size()), we.data());
  const auto ge = to_host<float>(de, we.size());
  EXPECT_EQ(ge, we);
  EXPECT_NE(we[0], 0.0f);
}

// QK-norm + rope + cache store, then attention, for a two-row-per-sequence prefill followed by a
// decode row, against cpu::rms_norm / rope / attention over the same cache contents.
void check_attention(int64_t Hq, int64_t Hkv, int64_t D, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "Hq " << Hq << " Hkv " << Hkv << " D " << D);
  std::mt19937 rng(seed);
  const int64_t S = 3, cap = 300, qw = Hq * D, kvw = Hkv * D, ld = qw + 2 * kvw;
  const auto qn = random_vec(rng, D, 0.5f, 1.5f), kn = random_vec(rng, D, 0.5f, 1.5f);
  std::vector<float> inv(D / 2);
  cpu::rope_inv_freq(1e6f, D, inv.data());
  const auto dqn = to_device(qn), dkn = to_device(kn), dinv = to_device(inv);
  auto dk = to_device(std::vector<float>(S * cap * kvw, 0.0f)), dv = to_device(std::vector<float>(S * cap * kvw, 0.0f));
  ASSERT_TRUE(cuda::attention_reserve(cap, D).ok());
  const cuda::KvLayer kv{dk.as<float>(), dv.as<float>(), cap * kvw, cap};
  std::vector<std::vector<float>> ck(S, std::vector<float>(cap * kvw)), cvv(S, std::vector<float>(cap * kvw));
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Call 1: sequence s gets rows at positions 0..len[s]−1 (s = 2 gets a long prefill); call 2: one
  // row per sequence at the next position.
  const int64_t len[S] = {2, 5, 260};
  for (int call = 0; call < 2; ++call) {
    std::vector<int32_t> seq, pos;
    for (int64_t s = 0; s < S; ++s)
      for (int64_t t = 0; t < (call == 0 ? len[s] : 1); ++t) {
        seq.push_back(static_cast<int32_t>(s));
        pos.push_back(static_cast<int32_t>(call == 0 ? t : len[s]));
      }
    const int64_t R = static_cast<int64_t>(seq.size());
    const auto qkv = random_vec(rng, R * ld, -2.0f, 2.0f);
    const auto dqkv = to_device(qkv), dseq = to_device(seq), dpos = to_device(pos);
    auto dq = poisoned(R * qw), dout = poisoned(R * qw);
    const cuda::RowMap map{dseq.as<int32_t>(), dpos.as<int32_t>(), R, false};
    const cuda::HeadShape shape{Hq, Hkv, D};
    // The decode call also goes through the fused kernel, on a copy of the caches.
    auto dk2 = to_device(to_host<float>(dk, S * cap * kvw)), dv2 = to_device(to_host<float>(dv, S * cap * kvw));
    auto dout2 = poisoned(R * qw);
    if (call == 1) {
      const cuda::KvLayer kv2{dk2.as<float>(), dv2.as<float>(), cap * kvw, cap};
      ASSERT_TRUE(cuda::attention_decode(dqkv.as<float>(), ld, shape, dqn.as<float>(), dkn.as<float>(), 1e-6f,
                                         dinv.as<float>(), scale, {dseq.as<int32_t>(), dpos.as<int32_t>(), R, true}, kv2,
                                         dout2.as<float>(), nullptr).ok());
    }
    ASSERT_TRUE(cuda::qk_norm_rope_store(dqkv.as<float>(), ld, shape, dqn.as<float>(), dkn.as<float>(), 1e-6f,
                                         dinv.as<float>(), map, kv, dq.as<float>(), nullptr).ok());
    ASSERT_TRUE(cuda::attention(dq.as<float>(), shape, scale, map, kv, dout.as<float>(), nullptr).ok());
    // CPU reference.
    std::vector<float> q(R * qw), out(R * qw);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t p = pos[r];
      std::vector<float> qr(qkv.begin() + r * ld, qkv.begin() + r * ld + qw);
      std::vector<float> kr(qkv.begin() + r * ld + qw, qkv.begin() + r * ld + qw + kvw);
      cpu::rms_norm(qr.data(), qn.data(), qr.data(), Hq, D, 1e-6f);
      cpu::rms_norm(kr.data(), kn.data(), kr.data(), Hkv, D, 1e-6f);
      cpu::rope(qr.data(), 1, Hq, D, &p, inv.data());
      cpu::rope(kr.data(), 1, Hkv, D, &p, inv.data());
      std::copy(qr.begin(), qr.end(), q.begin() + r * qw);
      std::copy(kr.begin(), kr.end(), ck[seq[r]].begin() + p * kvw);
      std::copy(qkv.begin() + r * ld + qw + kvw, qkv.begin() + (r + 1) * ld, cvv[seq[r]].begin() + p * kvw);
    }
    for (int64_t r0 = 0; r0 < R;) {
      int64_t r1 = r0;
      while (r1 < R && seq[r1] == seq[r0]) ++r1;
      cpu::attention(q.data() + r0 * qw, r1 - r0, Hq, ck[seq[r0]].data(), cvv[seq[r0]].data(), pos[r1 - 1] + 1, Hkv, D,
                     pos[r0], 0, scale, out.data() + r0 * qw);
      r0 = r1;
    }
    EXPECT_LT(rel_err(to_host<float>(dq, R * qw), q), 2e-6) << "call " << call << " q";
    EXPECT_LT(rel_err(to_host<float>(dout, R * qw), out), 2e-5) << "call " << call << " attention";
    if (call == 1) {
      EXPECT_LT(rel_err(to_host<float>(dout2, R * qw), out), 2e-5) << "fused decode attention";
    }
    const auto gk = to_host<float>(dk, S * cap * kvw), gv = to_host<float>(dv, S * cap * kvw);
    for (int64_t s = 0; s < S; ++s) {
      const int64_t n = (len[s] + call) * kvw;
      EXPECT_LT(rel_err({gk.begin() + s * cap * kvw, gk.begin() + s * cap * kvw + n}, {ck[s].begin(), ck[s].begin() + n}), 2e-6);
      EXPECT_EQ(std::vector<float>(gv.begin() + s * cap * kvw, gv.begin() + s * cap * kvw + n),
                std::vector<float>(cvv[s].begin(), cvv[s].begin() + n));
      if (call == 1) {  // the fused kernel stored the same keys and values
        const auto fk = to_host<float>(dk2, S * cap * kvw), fv = to_host<float>(dv2, S * cap * kvw);
        EXPECT_LT(rel_err({fk.begin() + s * cap * kvw, fk.begin() + s * cap * kvw + n}, {ck[s].begin(), ck[s].begin() + n}), 2e-6);
        EXPECT_EQ(std::vector<float>(fv.begin() + s * cap * kvw, fv.begin() + s * cap * kvw + n),
                  std::vector<float>(cvv[s].begin(), cvv[s].begin() + n));
      }
    }
  }
}

// The random inputs of a decode-attention check over two sequences: QK-norm weights, rotary
// frequencies, and the earlier positions' keys and values as any earlier step left them.
struct AttentionInputs {
  int64_t S, qw, kvw, ld;
  std::vector<float> qn, kn, inv, k0, v0;
  cuda::DeviceBuffer dqn, dkn, dinv;
  float scale;
};

AttentionInputs attention_inputs(std::mt19937& rng, int64_t Hq, int64_t Hkv, int64_t D, int64_t cap) {
  AttentionInputs in;
  in.S = 2;
  in.qw = Hq * D;
  in.kvw = Hkv * D;
  in.ld = in.qw + 2 * in.kvw;
  in.qn = random_vec(rng, D, 0.5f, 1.5f);
  in.kn = random_vec(rng, D, 0.5f, 1.5f);
  in.inv.resize(D / 2);
  cpu::rope_inv_freq(1e6f, D, in.inv.data());
  in.dqn = to_device(in.qn);
  in.dkn = to_device(in.kn);
  in.dinv = to_device(in.inv);
  in.k0 = random_vec(rng, in.S * cap * in.kvw, -1.5f, 1.5f);
  in.v0 = random_vec(rng, in.S * cap * in.kvw, -1.5f, 1.5f);
  in.scale = 1.0f / std::sqrt(static_cast<float>(D));
  return in;
}

// A specialized decode-attention kernel (`use` switches it on and off) against the general one bit
// for bit (outputs and cache stores), f32 and bf16, at the first, an inner and the last position,
// and the f32 result against the CPU.
void check_specialized_attention(void (*use)(bool), int64_t Hq, int64_t Hkv, int64_t D, int64_t cap, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "Hq " << Hq << " Hkv " << Hkv << " D " << D << " capacity " << cap);
  std::mt19937 rng(seed);
  const AttentionInputs in = attention_inputs(rng, Hq, Hkv, D, cap);
  const int64_t S = in.S, qw = in.qw, kvw = in.kvw, ld = in.ld;
  const auto &qn = in.qn, &kn = in.kn, &inv = in.inv, &k0 = in.k0, &v0 = in.v0;
  const auto &dqn = in.dqn, &dkn = in.dkn, &dinv = in.dinv;
  const float scale = in.scale;
  ASSERT_TRUE(cuda::attention_reserve(cap, D).ok());
  for (const int64_t p : {int64_t{0}, int64_t{1}, cap / 2 + 1, cap - 1}) {
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(testing::Message() << "position " << p << (bf16 ? " bf16" : " f32"));
      const std::vector<int32_t> seq = {1, 0}, pos = {static_cast<int32_t>(p), static_cast<int32_t>(p)};
      const auto qkv = random_vec(rng, S * ld, -2.0f, 2.0f);
      const auto dqkv = to_device(qkv), dseq = to_device(seq), dpos = to_device(pos);
      std::vector<float> out[2], kc[2], vc[2];
      for (const bool small : {true, false}) {
        use(small);
        auto dk = to_device(k0), dv = to_device(v0);
        auto dout = poisoned(S * qw);
        ASSERT_TRUE(cuda::attention_decode(dqkv.as<float>(), ld, {Hq, Hkv, D}, dqn.as<float>(), dkn.as<float>(), 1e-6f,
                                           dinv.as<float>(), scale, {dseq.as<int32_t>(), dpos.as<int32_t>(), S, true},
                                           {dk.as<float>(), dv.as<float>(), cap * kvw, cap}, dout.as<float>(), nullptr, bf16)
                        .ok());
        out[small] = to_host<float>(dout, S * qw);
        kc[small] = to_host<float>(dk, S * cap * kvw);
        vc[small] = to_host<float>(dv, S * cap * kvw);
      }
      use(true);
      EXPECT_EQ(out[1], out[0]);
      EXPECT_EQ(kc[1], kc[0]);
      EXPECT_EQ(vc[1], vc[0]);
      EXPECT_NE(vc[1], v0) << "the new value was not stored";
      if (bf16) continue;
      // CPU: the new rows normed and rotated into a copy of the caches, then attention over 0..p.
      std::vector<float> want(S * qw);
      for (int64_t r = 0; r < S; ++r) {
        std::vector<float> ck(k0.begin() + seq[r] * cap * kvw, k0.begin() + (seq[r] + 1) * cap * kvw);
        std::vector<float> cv(v0.begin() + seq[r] * cap * kvw, v0.begin() + (seq[r] + 1) * cap * kvw);
        std::vector<float> q(qkv.begin() + r * ld, qkv.begin() + r * ld + qw);
        std::vector<float> kr(qkv.begin() + r * ld + qw, qkv.begin() + r * ld + qw + kvw);
        cpu::rms_norm(q.data(), qn.data(), q.data(), Hq, D, 1e-6f);
        cpu::rms_norm(kr.data(), kn.data(), kr.data(), Hkv, D, 1e-6f);
        const int64_t pr = p;
        cpu::rope(q.data(), 1, Hq, D, &pr, inv.data());
        cpu::rope(kr.data(), 1, Hkv, D, &pr, inv.data());
        std::copy(kr.begin(), kr.end(), ck.begin() + p * kvw);
        std::copy(qkv.begin() + r * ld + qw + kvw, qkv.begin() + (r + 1) * ld, cv.begin() + p * kvw);
        cpu::attention(q.data(), 1, Hq, ck.data(), cv.data(), p + 1, Hkv, D, p, 0, scale, want.data() + r * qw);
      }
      EXPECT_LT(rel_err(out[1], want), 2e-5);
    }
  }
}

// Decode attention over small caches (the depth decoders' ≤ 32 positions).
TEST(GpuAttention, SmallCacheKernelEqualsTheGeneralOne) {
  REQUIRE_GPU();
  check_specialized_attention(cuda::set_small_attention, 8, 2, 128, 16, 31);   // Breeze's depth decoder
  check_specialized_attention(cuda::set_small_attention, 16, 8, 128, 17, 32);  // Qwen3-TTS's code predictor
  check_specialized_attention(cuda::set_small_attention, 4, 2, 64, 32, 33);
}

// Decode attention over long caches (the backbones and talkers, head size 128: a cluster of blocks
// per head), also past the first round of score chunks (512 and 1024 keys).
TEST(GpuAttention, LongCacheKernelEqualsTheGeneralOne) {
  REQUIRE_GPU();
  check_specialized_attention(cuda::set_long_attention, 16, 8, 128, 300, 34);  // Breeze's backbone
  check_specialized_attention(cuda::set_long_attention, 16, 2, 128, 65, 35);
  check_specialized_attention(cuda::set_long_attention, 16, 8, 128, 1100, 36);
}

// The many-row kernels (W warps per (row, query head), or kRowAttentionGroup4: four warps per (row,
// kv group)), forced on at any row count, against the cluster kernel.
template <int W>
void use_row_attention(bool on) {
  cuda::set_row_attention(on ? W : 0);
}

TEST(GpuAttention, ManyRowKernelEqualsTheClusterKernel) {
  REQUIRE_GPU();
  for (auto* use : {use_row_attention<1>, use_row_attention<4>, use_row_attention<cuda::kRowAttentionGroup4>}) {
    check_specialized_attention(use, 16, 8, 128, 300, 37);
    check_specialized_attention(use, 16, 2, 128, 65, 38);  // groups of 8: one warp per head
    check_specialized_attention(use, 6, 2, 128, 1100, 39);  // a block with idle warps
    check_specialized_attention(use, 8, 2, 128, 1100, 41);  // groups of 4
  }
  cuda::set_row_attention(cuda::kRowAttentionAuto);
}

// Many rows at once, as serving steps them: 160 rows over 192 sequences in a shuffled order, each
// at its own position (some inactive, position −1), f32 and bf16. The kernel the row count picks,
// and each many-row variant, must give every row what the cluster kernel gives it, bit for bit,
// and store the same keys and values. The same for prefill rows (formed queries, every key in the
// cache) against the general kernel.
void check_many_rows(int64_t Hq, int64_t Hkv, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "Hq " << Hq << " Hkv " << Hkv);
  std::mt19937 rng(seed);
  const int64_t D = 128, cap = 384, S = 192, R = 160;
  const int64_t qw = Hq * D, kvw = Hkv * D, ld = qw + 2 * kvw;
  ASSERT_TRUE(cuda::attention_reserve(cap, D).ok());
  ASSERT_GE(R, cuda::kRowAttentionGroupRows) << "the default must pick a many-row kernel here";
  std::vector<int32_t> seq(static_cast<size_t>(S)), pos;
  std::iota(seq.begin(), seq.end(), 0);
  std::shuffle(seq.begin(), seq.end(), rng);
  seq.resize(static_cast<size_t>(R));
  std::uniform_int_distribution<int32_t> any(-1, static_cast<int32_t>(cap - 1));
  for (int64_t r = 0; r < R; ++r) pos.push_back(r % 7 == 3 ? -1 : any(rng));
  const auto k0 = random_vec(rng, static_cast<size_t>(S * cap * kvw), -1.5f, 1.5f);
  const auto v0 = random_vec(rng, static_cast<size_t>(S * cap * kvw), -1.5f, 1.5f);
  const auto dqn = to_device(random_vec(rng, D, 0.5f, 1.5f)), dkn = to_device(random_vec(rng, D, 0.5f, 1.5f));
  std::vector<float> inv(D / 2);
  cpu::rope_inv_freq(1e6f, D, inv.data());
  const auto dinv = to_device(inv), dseq = to_device(seq), dpos = to_device(pos);
  for (const bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    const auto dqkv = to_device(random_vec(rng, static_cast<size_t>(R * ld), -2.0f, 2.0f));
    // The cluster kernel, 1 and 4 warps per head, 4 warps per kv group, the default for R rows.
    const int variants[] = {0, 1, 4, cuda::kRowAttentionGroup4, cuda::kRowAttentionAuto};
    constexpr int kVariants = 5;
    std::vector<float> out[kVariants], kc[kVariants], vc[kVariants];
    for (int w = 0; w < kVariants; ++w) {
      cuda::set_row_attention(variants[w]);
      auto dk = to_device(k0), dv = to_device(v0);
      auto dout = poisoned(static_cast<size_t>(R * qw));
      ASSERT_TRUE(cuda::attention_decode(dqkv.as<float>(), ld, {Hq, Hkv, D}, dqn.as<float>(), dkn.as<float>(), 1e-6f,
                                         dinv.as<float>(), 1.0f / std::sqrt(static_cast<float>(D)),
                                         {dseq.as<int32_t>(), dpos.as<int32_t>(), R, true},
                                         {dk.as<float>(), dv.as<float>(), cap * kvw, cap}, dout.as<float>(), nullptr, bf16)
                      .ok());
      out[w] = to_host<float>(dout, static_cast<size_t>(R * qw));
      kc[w] = to_host<float>(dk, static_cast<size_t>(S * cap * kvw));
      vc[w] = to_host<float>(dv, static_cast<size_t>(S * cap * kvw));
    }
    cuda::set_row_attention(cuda::kRowAttentionAuto);
    EXPECT_FALSE(std::any_of(out[0].begin(), out[0].end(), [](float x) { return std::isnan(x); }));
    EXPECT_NE(vc[0], v0) << "no new value was stored";
    for (int w = 1; w < kVariants; ++w) {
      SCOPED_TRACE(testing::Message() << "variant " << variants[w]);
      for (int64_t r = 0; r < R; ++r)
        EXPECT_TRUE(std::equal(out[w].begin() + r * qw, out[w].begin() + (r + 1) * qw, out[0].begin() + r * qw))
            << "row " << r << " at position " << pos[static_cast<size_t>(r)];
      EXPECT_EQ(kc[w], kc[0]);
      EXPECT_EQ(vc[w], vc[0]);
    }
    const auto dq = to_device(random_vec(rng, static_cast<size_t>(R * qw), -2.0f, 2.0f));
    const auto dk = to_device(k0), dv = to_device(v0);
    std::vector<float> prefill[kVariants];
    for (int w = 0; w < kVariants; ++w) {  // 0: the general kernel
      cuda::set_row_attention(variants[w]);
      auto dout = poisoned(static_cast<size_t>(R * qw));
      ASSERT_TRUE(cuda::attention(dq.as<float>(), {Hq, Hkv, D}, 1.0f / std::sqrt(static_cast<float>(D)),
                                  {dseq.as<int32_t>(), dpos.as<int32_t>(), R, true},
                                  {dk.as<float>(), dv.as<float>(), cap * kvw, cap}, dout.as<float>(), nullptr, bf16)
                      .ok());
      prefill[w] = to_host<float>(dout, static_cast<size_t>(R * qw));
    }
    cuda::set_row_attention(cuda::kRowAttentionAuto);
    EXPECT_FALSE(std::any_of(prefill[0].begin(), prefill[0].end(), [](float x) { return std::isnan(x); }));
    for (int w = 1; w < kVariants; ++w) EXPECT_EQ(prefill[w], prefill[0]) << "prefill rows, variant " << variants[w];
  }
}

TEST(GpuAttention, ManyRowsEachGetWhatTheClusterKernelGives) {
  REQUIRE_GPU();
  check_many_rows(8, 2, 40);   // kv groups of 4
  check_many_rows(16, 8, 42);  // of 2, the talkers' and backbones' shape
}

// The fused decode attentions form the rotation (and the small kernel preloads the earlier keys) at
// the position they read before their PDL wait. When the kernel just before moves the position
// after it let them launch, they must form both again. Here that kernel is the sampler (one block
// per row): it lets the next launch start at its wait and then writes the position (id p, the only
// one its top-k of 1 keeps) after several microseconds of work, so the attention reads p − 1 before
// its wait. The result must equal, bit for bit, the attention launched after the position was set
// and synchronized.
void check_moved_position(int64_t Hq, int64_t Hkv, int64_t D, int64_t cap, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "Hq " << Hq << " Hkv " << Hkv << " D " << D << " capacity " << cap);
  std::mt19937 rng(seed);
  const AttentionInputs in = attention_inputs(rng, Hq, Hkv, D, cap);
  const int64_t S = in.S, qw = in.qw, kvw = in.kvw, ld = in.ld;
  const auto &k0 = in.k0, &v0 = in.v0;
  const auto &dqn = in.dqn, &dkn = in.dkn, &dinv = in.dinv;
  const float scale = in.scale;
  ASSERT_TRUE(cuda::attention_reserve(cap, D).ok());
  const std::vector<int32_t> seq = {1, 0};
  const auto dseq = to_device(seq);
  constexpr int64_t kVocab = 2051;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  cuda::DeviceSampler sp;
  sp.top_k = 1;
  const auto dparams = to_device(std::vector<cuda::DeviceSampler>(S, sp));
  auto derr = to_device(std::vector<int32_t>(S, 0));
  auto dw = to_device(std::vector<double>(static_cast<size_t>(S * kVocab)));
  auto dids = to_device(std::vector<int32_t>(static_cast<size_t>(2 * S * kVocab)));
  cudaStream_t st = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  for (const int32_t p : {int32_t{1}, int32_t{2}, static_cast<int32_t>(cap / 2), static_cast<int32_t>(cap - 1)}) {
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(testing::Message() << "position " << p << (bf16 ? " bf16" : " f32"));
      const auto dqkv = to_device(random_vec(rng, S * ld, -2.0f, 2.0f));
      std::vector<float> out[2], kc[2], vc[2];
      for (const bool moved : {false, true}) {
        auto dk = to_device(k0), dv = to_device(v0);
        auto dout = poisoned(S * qw);
        auto dpos = to_device(std::vector<int32_t>(S, moved ? p - 1 : p));
        std::vector<float> logits(static_cast<size_t>(S * kVocab));
        for (auto& l : logits) l = nd(rng);
        for (int64_t r = 0; r < S; ++r) logits[static_cast<size_t>(r * kVocab + p)] = 50.0f;
        auto dlogits = to_device(logits);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        // One graph, as the engines launch a step: the attention node may start as soon as the
        // sampler lets it, without the host's launch gap between them.
        ASSERT_EQ(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        if (moved) {
          cuda::SampleArgs a;
          a.logits = dlogits.as<float>();
          a.ld = kVocab;
          a.vocab = kVocab;
          a.rows = static_cast<int32_t>(S);
          a.params = dparams.as<cuda::DeviceSampler>();
          a.out = dpos.as<int32_t>();
          a.error = derr.as<int32_t>();
          a.scratch_w = dw.as<double>();
          a.scratch_ids = dids.as<int32_t>();
          EXPECT_TRUE(cuda::sample(a, st).ok());
        }
        EXPECT_TRUE(cuda::attention_decode(dqkv.as<float>(), ld, {Hq, Hkv, D}, dqn.as<float>(), dkn.as<float>(), 1e-6f,
                                           dinv.as<float>(), scale, {dseq.as<int32_t>(), dpos.as<int32_t>(), S, true},
                                           {dk.as<float>(), dv.as<float>(), cap * kvw, cap}, dout.as<float>(), st, bf16)
                        .ok());
        cudaGraph_t graph = nullptr;
        ASSERT_EQ(cudaStreamEndCapture(st, &graph), cudaSuccess);
        cudaGraphExec_t exec = nullptr;
        ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
        ASSERT_EQ(cudaGraphLaunch(exec, st), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        EXPECT_EQ(to_host<int32_t>(dpos, S), std::vector<int32_t>(S, p));
        out[moved] = to_host<float>(dout, S * qw);
        kc[moved] = to_host<float>(dk, S * cap * kvw);
        vc[moved] = to_host<float>(dv, S * cap * kvw);
      }
      EXPECT_EQ(out[1], out[0]);
      EXPECT_EQ(kc[1], kc[0]);
      EXPECT_EQ(vc[1], vc[0]);
    }
  }
  EXPECT_EQ(to_host<int32_t>(derr, S), std::vector<int32_t>(S, 0));
  cudaStreamDestroy(st);
}

TEST(GpuAttention, PositionMovedByThePreviousKernel) {
  REQUIRE_GPU();
  check_moved_position(8, 2, 128, 16, 36);    // the small-cache kernel
  check_moved_position(16, 8, 128, 300, 37);  // the long-cache kernel
  check_moved_position(4, 2, 16, 300, 38);    // the general kernel
}

TEST(GpuAttention, NormRopeStoreAndAttentionMatchTheCpu) {
  REQUIRE_GPU();
  check_attention(4, 2, 16, 21);    // the tiny goldens' shape
  check_attention(16, 8, 128, 22);  // Qwen3-TTS real size
}

}  // namespace
}  // namespace chorus::gpu_test
