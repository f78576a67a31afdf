// The GPU codec's batched streaming kernels (runtime/cuda/codec_elements.h) run on the CPU, one
// call of the per-element function per thread: im2col of a causal conv, the depthwise conv, the
// transposed conv's output stage, the per-channel op and the rope / ring store. Streams start at
// different points (a solo prefix of a different length each, then steps of all of them together,
// some shorter and some longer than the history), and after every step each stream's values must
// be those of one pass over its whole sequence, computed here from the definitions; ring stores
// must land in the stream's own ring rows and nowhere else.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/cuda/codec_elements.h"

namespace chorus::cuda::codec_ops {
namespace {

std::vector<float> random_vec(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Each stream's two history buffers (a layer's history at `offset` in both), and the parity
// that says which one is read.
struct Histories {
  int64_t offset = 0;
  std::vector<std::array<std::vector<float>, 2>> bufs;
  std::vector<int> parity;
  std::vector<const float*> in;
  std::vector<float*> out;

  Histories(size_t streams, size_t floats, int64_t off) : offset(off), bufs(streams), parity(streams, 0) {
    for (auto& b : bufs)
      for (auto& h : b) h.assign(floats + static_cast<size_t>(off), 0.0f);
  }
  // The StreamHist of a step of the given streams (in batch order); flips their parities after.
  StreamHist step(const std::vector<size_t>& streams) {
    in.clear();
    out.clear();
    for (size_t s : streams) {
      in.push_back(bufs[s][static_cast<size_t>(parity[s])].data());
      out.push_back(bufs[s][static_cast<size_t>(1 - parity[s])].data());
    }
    return StreamHist{in.data(), out.data(), offset};
  }
  void flip(const std::vector<size_t>& streams) {
    for (size_t s : streams) parity[s] ^= 1;
  }
};

// The schedule: stream b first steps its prefix alone, then all step together by these counts.
constexpr int64_t kPrefix[3] = {0, 4, 23};
constexpr int64_t kTogether[5] = {1, 5, 2, 25, 7};
int64_t together_total() {
  int64_t t = 0;
  for (int64_t n : kTogether) t += n;
  return t;
}

// Calls fn(streams, n, first_pos) for every step of the schedule: first_pos[i] is where stream
// streams[i] stands before the step.
template <class Fn>
void for_each_step(Fn fn) {
  std::array<int64_t, 3> pos{};
  for (size_t b = 0; b < 3; ++b)
    if (kPrefix[b] > 0) {
      fn(std::vector<size_t>{b}, kPrefix[b], std::vector<int64_t>{0});
      pos[b] = kPrefix[b];
    }
  for (int64_t n : kTogether) {
    fn(std::vector<size_t>{0, 1, 2}, n, std::vector<int64_t>{pos[0], pos[1], pos[2]});
    for (int64_t& p : pos) p += n;
  }
}

// conv.cu's im2col launch run on the host, block by block: each block's window staged, then its
// threads' stores, with `width` threads per block; with `pairs`, two steps a thread (a block then
// owns 2·width steps).
void im2col_by_windows(const Im2col& a, int64_t width, bool pairs = false) {
  const int64_t per_block = pairs ? 2 * width : width;
  for (int64_t b = 0; b < a.streams; ++b)
    for (int64_t c = 0; c < a.cin; ++c)
      for (int64_t w = 0; w < im2col_windows(a.steps, per_block); ++w) {
        std::vector<float> win(static_cast<size_t>(im2col_window_span(a, w, per_block)));
        for (size_t p = 0; p < win.size(); ++p)
          win[p] = im2col_window_value(a, w, per_block, c, b, static_cast<int64_t>(p));
        for (int64_t tid = 0; tid < width; ++tid) {
          if (pairs)
            im2col_window_store_pairs(a, w, width, c, b, tid, win.data());
          else
            im2col_window_store(a, w, width, c, b, tid, win.data());
        }
      }
}

// Also as bf16 columns (Im2col::col16): the same values rounded to bf16 as core/dtype.h rounds.
TEST(CodecStreamKernels, Im2colOfEveryStreamEqualsOnePassOverItsSequence) {
  for (bool time_major : {false, true}) {
    std::mt19937 rng(time_major ? 3 : 4);
    const int64_t cin = 3, K = 7, dil = 3, H = (K - 1) * dil;
    const int64_t T = 23 + together_total();
    std::vector<std::vector<float>> seq;  // per stream [cin, T], before SnakeBeta
    for (int b = 0; b < 3; ++b) seq.push_back(random_vec(rng, static_cast<size_t>(cin * T), -2.0f, 2.0f));
    const std::vector<float> alpha = random_vec(rng, cin, 0.5f, 1.5f), inv_beta = random_vec(rng, cin, 0.2f, 1.0f);
    const Snake sn{alpha.data(), inv_beta.data()};
    auto act = [&](size_t b, int64_t c, int64_t t) { return snake_at(seq[b][c * T + t], alpha[c], inv_beta[c]); };
    Histories hist(3, static_cast<size_t>(cin * H), 5);
    int64_t checked = 0, wrong = 0, step = 0, checked16 = 0, wrong16 = 0, checked_pairs = 0;
    for_each_step([&](const std::vector<size_t>& streams, int64_t n, const std::vector<int64_t>& pos) {
      const int64_t S = static_cast<int64_t>(streams.size()), N = S * n;
      std::vector<float> x(static_cast<size_t>(cin * N));
      for (int64_t j = 0; j < S; ++j)
        for (int64_t c = 0; c < cin; ++c)
          for (int64_t t = 0; t < n; ++t)
            x[time_major ? (j * n + t) * cin + c : c * N + j * n + t] = seq[streams[j]][c * T + pos[j] + t];
      Im2col a;
      a.hist = hist.step(streams);
      a.x = x.data();
      a.xcs = time_major ? 1 : N;
      a.xts = time_major ? cin : 1;
      a.cin = cin;
      a.steps = n;
      a.streams = S;
      a.kernel = K;
      a.dilation = dil;
      a.snake = sn;
      // The launch's block width, and narrower ones whose windows split the steps (more windows
      // than the history is long, so that only the last one writes it). Each runs last in turn:
      // its history is the one the next step reads.
      std::array<int64_t, 3> widths{im2col_window_threads(n), 4, 1};
      std::rotate(widths.begin(), widths.begin() + (step++ % 3), widths.end());
      for (int64_t width : widths) {
        std::vector<float> col(static_cast<size_t>(cin * K * N), NAN);
        a.col = col.data();
        im2col_by_windows(a, width);
        // col[(c·K + k)·N + j·n + t] = stream j's activated input at time pos + t + k·dil − H (0 before 0).
        for (int64_t j = 0; j < S; ++j)
          for (int64_t c = 0; c < cin; ++c)
            for (int64_t k = 0; k < K; ++k)
              for (int64_t t = 0; t < n; ++t) {
                const int64_t at = pos[j] + t + k * dil - H;
                const float want = at < 0 ? 0.0f : act(streams[j], c, at);
                wrong += col[static_cast<size_t>((c * K + k) * N + j * n + t)] != want;
                ++checked;
              }
        if (width != widths[0]) continue;
        // With col16 the same columns go there rounded to bf16, and col is left alone.
        std::vector<uint16_t> col16(col.size(), 0xffffu);
        std::vector<float> untouched(col.size(), NAN);
        a.col16 = col16.data();
        a.col = untouched.data();
        im2col_by_windows(a, width);
        a.col16 = nullptr;
        for (size_t i = 0; i < col.size(); ++i) {
          wrong16 += col16[i] != f32_to_bf16(col[i]) || !std::isnan(untouched[i]);
          ++checked16;
        }
        if (n % 2 != 0) continue;
        // Two steps a thread where the steps are even: the same bf16 columns, in blocks of the
        // launch's width and of narrower ones (several windows per stream).
        // Their next histories too: each stream's as the one-step-a-thread run just wrote it.
        std::vector<std::vector<float>> next;
        for (int64_t j = 0; j < S; ++j) next.emplace_back(hist.out[j], hist.out[j] + hist.offset + cin * H);
        for (int64_t threads : {im2col_window_threads(n / 2), int64_t{1}}) {
          std::vector<uint16_t> pairs(col.size(), 0xffffu);
          for (int64_t j = 0; j < S; ++j) std::fill(hist.out[j], hist.out[j] + hist.offset + cin * H, NAN);
          a.col16 = pairs.data();
          im2col_by_windows(a, threads, true);
          a.col16 = nullptr;
          for (size_t i = 0; i < col.size(); ++i) {
            wrong16 += pairs[i] != col16[i];
            ++checked_pairs;
          }
          for (int64_t j = 0; j < S; ++j)
            for (int64_t i = hist.offset; i < hist.offset + cin * H; ++i) {
              const float want = next[static_cast<size_t>(j)][static_cast<size_t>(i)];
              wrong16 += std::memcmp(&hist.out[j][i], &want, sizeof want) != 0;
              ++checked_pairs;
            }
        }
      }
      hist.flip(streams);
    });
    EXPECT_EQ(wrong, 0) << "time_major " << time_major;
    EXPECT_GT(checked, 1000);
    EXPECT_EQ(wrong16, 0) << "time_major " << time_major;
    EXPECT_GT(checked16, 1000);
    EXPECT_GT(checked_pairs, 200);
  }
}

TEST(CodecStreamKernels, DepthwiseOfEveryStreamEqualsOnePassOverItsSequence) {
  std::mt19937 rng(7);
  const int64_t C = 4, K = 7, dil = 2, H = (K - 1) * dil, T = 23 + together_total();
  std::vector<std::vector<float>> seq;
  for (int b = 0; b < 3; ++b) seq.push_back(random_vec(rng, static_cast<size_t>(C * T)));
  const std::vector<float> w = random_vec(rng, static_cast<size_t>(C * K)), bias = random_vec(rng, C);
  Histories hist(3, static_cast<size_t>(C * H), 0);
  double worst = 0;
  int64_t checked = 0;
  for_each_step([&](const std::vector<size_t>& streams, int64_t n, const std::vector<int64_t>& pos) {
    const int64_t S = static_cast<int64_t>(streams.size()), N = S * n;
    std::vector<float> x(static_cast<size_t>(C * N)), y(static_cast<size_t>(C * N), NAN);
    for (int64_t j = 0; j < S; ++j)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < n; ++t) x[c * N + j * n + t] = seq[streams[j]][c * T + pos[j] + t];
    Depthwise a;
    a.hist = hist.step(streams);
    a.x = x.data();
    a.channels = C;
    a.steps = n;
    a.streams = S;
    a.kernel = K;
    a.dilation = dil;
    a.weight = w.data();
    a.bias = bias.data();
    a.y = y.data();
    for (int64_t i = 0; i < depthwise_elements(a); ++i) depthwise_element(a, i);
    hist.flip(streams);
    for (int64_t j = 0; j < S; ++j)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < n; ++t) {
          double want = bias[c];
          for (int64_t k = 0; k < K; ++k) {
            const int64_t at = pos[j] + t + k * dil - H;
            if (at >= 0) want += static_cast<double>(w[c * K + k]) * seq[streams[j]][c * T + at];
          }
          const double e = std::fabs(y[c * N + j * n + t] - want);
          if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : e;
          ++checked;
        }
  });
  EXPECT_LT(worst, 1e-5);  // 8 f32 terms of magnitude <= 1
  EXPECT_GT(checked, 500);
}

TEST(CodecStreamKernels, TransposedOutputOfEveryStreamEqualsOnePassOverItsSequence) {
  for (int64_t K : {5, 8}) {  // stride 4: kernel == stride (no history) and kernel == 2·stride
    std::mt19937 rng(static_cast<uint32_t>(K));
    const int64_t cout = 3, S = 4, T = 23 + together_total();
    std::vector<std::vector<float>> z;  // per stream, z = Wᵀ·x over the whole sequence: [cout·K, T]
    for (int b = 0; b < 3; ++b) z.push_back(random_vec(rng, static_cast<size_t>(cout * K * T)));
    const std::vector<float> bias = random_vec(rng, cout);
    Histories hist(3, static_cast<size_t>(cout * K), 9);
    int64_t wrong = 0, checked = 0;
    for_each_step([&](const std::vector<size_t>& streams, int64_t n, const std::vector<int64_t>& pos) {
      const int64_t B = static_cast<int64_t>(streams.size()), N = B * n;
      std::vector<float> zs(static_cast<size_t>(cout * K * N)), y(static_cast<size_t>(cout * N * S), NAN);
      for (int64_t j = 0; j < B; ++j)
        for (int64_t r = 0; r < cout * K; ++r)
          for (int64_t t = 0; t < n; ++t) zs[r * N + j * n + t] = z[streams[j]][r * T + pos[j] + t];
      TconvOut a;
      if (K > S) a.hist = hist.step(streams);
      a.z = zs.data();
      a.cout = cout;
      a.steps = n;
      a.streams = B;
      a.kernel = K;
      a.stride = S;
      a.bias = bias.data();
      a.y = y.data();
      for (int64_t i = 0; i < tconv_elements(a); ++i) tconv_element(a, i);
      if (K > S) hist.flip(streams);
      // Output sample t·S + j of a stream: bias + the previous input's tap j + S (when it exists
      // and the previous input does) + this input's tap j, added in that order.
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < cout; ++c)
          for (int64_t t = 0; t < n; ++t)
            for (int64_t j = 0; j < S; ++j) {
              const std::vector<float>& zf = z[streams[b]];
              const int64_t tt = pos[b] + t;
              float want = bias[c];
              if (j + S < K) want += tt > 0 ? zf[(c * K + j + S) * T + tt - 1] : 0.0f;
              want += zf[(c * K + j) * T + tt];
              wrong += y[c * N * S + b * n * S + t * S + j] != want;
              ++checked;
            }
    });
    EXPECT_EQ(wrong, 0) << "kernel " << K;
    EXPECT_GT(checked, 1000);
  }
}

TEST(CodecStreamKernels, RopeStoreWritesEachStreamsOwnRingRows) {
  std::mt19937 rng(9);
  const int64_t Hq = 4, Hkv = 2, D = 8, n = 4, layers = 2, layer = 1, kvd = Hkv * D;
  const int64_t caps[3] = {9, 12, 10}, pos0[3] = {0, 7, 30};  // stream 2 wraps its ring
  std::vector<std::vector<float>> rings;
  std::vector<float*> bases;
  for (int64_t c : caps) rings.emplace_back(static_cast<size_t>(layers * 2 * c * kvd), NAN);
  for (auto& r : rings) bases.push_back(r.data());
  const int64_t ld = (Hq + 2 * Hkv) * D;
  const std::vector<float> qkv = random_vec(rng, static_cast<size_t>(3 * n * ld));
  const std::vector<float> inv_freq = random_vec(rng, D / 2, 0.01f, 1.0f);
  std::vector<float> q(static_cast<size_t>(3 * n * Hq * D), NAN);
  RopeStore a;
  a.qkv = qkv.data();
  a.n = n;
  a.streams = 3;
  a.q_heads = Hq;
  a.kv_heads = Hkv;
  a.head_dim = D;
  a.inv_freq = inv_freq.data();
  a.kv = StreamKv{bases.data(), caps, pos0, layer, kvd};
  a.q_out = q.data();
  for (int64_t i = 0; i < rope_store_elements(a); ++i) rope_store_element(a, i);
  int64_t wrong = 0, written = 0;
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t r = 0; r < n; ++r) {
      const int64_t row = b * n + r, p = pos0[b] + r;
      for (int64_t h = 0; h < Hq + Hkv; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const float ang = static_cast<float>(p) * inv_freq[i];
          const float x = qkv[row * ld + h * D + i], y = qkv[row * ld + h * D + i + D / 2];
          const float lo = x * std::cos(ang) - y * std::sin(ang), hi = y * std::cos(ang) + x * std::sin(ang);
          const float *dlo, *dhi;
          if (h < Hq) {
            dlo = &q[(row * Hq + h) * D + i];
          } else {
            dlo = &rings[b][((2 * layer) * caps[b] + p % caps[b]) * kvd + (h - Hq) * D + i];
            const float* v = &rings[b][((2 * layer + 1) * caps[b] + p % caps[b]) * kvd + (h - Hq) * D + i];
            const float* vs = &qkv[row * ld + (Hq + Hkv) * D + (h - Hq) * D + i];
            wrong += v[0] != vs[0] || v[D / 2] != vs[D / 2];
          }
          dhi = dlo + D / 2;
          wrong += std::fabs(*dlo - lo) > 1e-5f || std::fabs(*dhi - hi) > 1e-5f || std::isnan(*dlo);
        }
    }
    for (float v : rings[static_cast<size_t>(b)]) written += !std::isnan(v);
  }
  EXPECT_EQ(wrong, 0);
  // Each stream: n rows of k and of v in the chosen layer, nothing else.
  EXPECT_EQ(written, 3 * n * 2 * kvd);
}

// The per-channel op, from its definition: bias, SnakeBeta, residual and clamp on a strided [C, T]
// view; with y16 the same values rounded to bf16 as core/dtype.h rounds them, and y left alone.
TEST(CodecStreamKernels, ChannelOpFollowsItsDefinitionInF32AndBf16) {
  std::mt19937 rng(11);
  const int64_t C = 5, T = 37;
  const std::vector<float> x = random_vec(rng, static_cast<size_t>(C * T), -4.0f, 4.0f);
  const std::vector<float> bias = random_vec(rng, C), res = random_vec(rng, static_cast<size_t>(C * T));
  const std::vector<float> alpha = random_vec(rng, C, 0.5f, 1.5f), inv_beta = random_vec(rng, C, 0.2f, 1.0f);
  int64_t checked = 0, wrong = 0, clamped = 0;
  for (bool time_major : {false, true})
    for (bool clamp : {false, true}) {
      ChannelOp op;
      op.x = x.data();
      op.xcs = time_major ? 1 : T;
      op.xts = time_major ? C : 1;
      op.ycs = T;  // out channels-first whatever the input's layout
      op.yts = 1;
      op.channels = C;
      op.steps = T;
      op.bias = bias.data();
      op.snake = Snake{alpha.data(), inv_beta.data()};
      op.residual = res.data();
      op.clamp = clamp;
      std::vector<float> y(static_cast<size_t>(C * T), NAN), y_after16(y.size(), NAN);
      std::vector<uint16_t> y16(y.size(), 0xffffu);
      op.y = y.data();
      for (int64_t i = 0; i < C * T; ++i) channel_element(op, i);
      op.y = y_after16.data();
      op.y16 = y16.data();
      for (int64_t i = 0; i < C * T; ++i) channel_element(op, i);
      for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < T; ++t) {
          float v = x[static_cast<size_t>(c * op.xcs + t * op.xts)] + bias[c];
          v = snake_at(v, alpha[c], inv_beta[c]) + res[static_cast<size_t>(c * T + t)];
          if (clamp) v = std::min(1.0f, std::max(-1.0f, v));
          clamped += clamp && std::fabs(v) == 1.0f;
          const size_t at = static_cast<size_t>(c * T + t);
          wrong += y[at] != v || y16[at] != f32_to_bf16(v) || !std::isnan(y_after16[at]);
          ++checked;
        }
    }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(checked, 4 * C * T);
  EXPECT_GT(clamped, 10);  // the clamp was exercised
}

// The four-step path: channel_quad writes what channel_element writes, in f32 and bf16, with and
// without each part of the op, on channels-first views with padded rows; and it is taken only
// where its 16-byte (8 for bf16) accesses stay aligned on every quad.
TEST(CodecStreamKernels, ChannelQuadsWriteWhatTheElementsWrite) {
  std::mt19937 rng(12);
  const int64_t C = 6, T = 40, xcs = T + 4, ycs = T + 8;
  alignas(16) static float x[C * xcs], res[C * T], y_elem[C * ycs], y_quad[C * ycs];
  alignas(16) static uint16_t h_elem[C * ycs], h_quad[C * ycs];
  const std::vector<float> xs = random_vec(rng, static_cast<size_t>(C * xcs), -4.0f, 4.0f);
  const std::vector<float> rs = random_vec(rng, static_cast<size_t>(C * T));
  std::copy(xs.begin(), xs.end(), x);
  std::copy(rs.begin(), rs.end(), res);
  const std::vector<float> bias = random_vec(rng, C), alpha = random_vec(rng, C, 0.5f, 1.5f),
                           inv_beta = random_vec(rng, C, 0.2f, 1.0f);
  int64_t compared = 0, differ = 0;
  for (int parts = 0; parts < 16; ++parts)
    for (bool bf16 : {false, true}) {
      ChannelOp op;
      op.x = x;
      op.xcs = xcs;
      op.xts = 1;
      op.ycs = ycs;
      op.yts = 1;
      op.channels = C;
      op.steps = T;
      if (parts & 1) op.bias = bias.data();
      if (parts & 2) op.snake = Snake{alpha.data(), inv_beta.data()};
      if (parts & 4) op.residual = res;
      op.clamp = (parts & 8) != 0;
      std::fill(std::begin(y_elem), std::end(y_elem), -7.0f);
      std::fill(std::begin(y_quad), std::end(y_quad), -7.0f);
      std::fill(std::begin(h_elem), std::end(h_elem), uint16_t{0xffff});
      std::fill(std::begin(h_quad), std::end(h_quad), uint16_t{0xffff});
      ChannelOp q = op;
      op.y = y_elem;
      q.y = y_quad;
      if (bf16) op.y16 = h_elem, q.y16 = h_quad;
      ASSERT_TRUE(channel_quads_fit(q));
      for (int64_t i = 0; i < C * T; ++i) channel_element(op, i);
      for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < T; t += 4) channel_quad(q, c, t);
      for (int64_t j = 0; j < C * ycs; ++j) {
        differ += std::memcmp(&y_elem[j], &y_quad[j], sizeof(float)) != 0 || h_elem[j] != h_quad[j];
        ++compared;
      }
      // Padding untouched by both, and the written values really are the op's (not the fill).
      EXPECT_EQ(y_quad[T + 2], -7.0f);
      if (bf16) EXPECT_NE(h_quad[ycs + 3], 0xffff);
      else EXPECT_NE(y_quad[ycs + 3], -7.0f);
    }
  EXPECT_EQ(differ, 0);
  EXPECT_EQ(compared, 32 * C * ycs);

  ChannelOp op;
  op.x = x;
  op.y = y_quad;
  op.xcs = xcs;
  op.ycs = ycs;
  op.xts = op.yts = 1;
  op.channels = C;
  op.steps = T;
  EXPECT_TRUE(channel_quads_fit(op));
  ChannelOp bad = op;
  bad.xts = C;  // time-major input
  EXPECT_FALSE(channel_quads_fit(bad));
  bad = op;
  bad.steps = T - 2;
  EXPECT_FALSE(channel_quads_fit(bad));
  bad = op;
  bad.x = x + 1;  // off 16 bytes
  EXPECT_FALSE(channel_quads_fit(bad));
  bad = op;
  bad.ycs = ycs + 2;  // later channels' rows off 16 bytes
  EXPECT_FALSE(channel_quads_fit(bad));
  bad = op;
  bad.residual = res + 2;
  EXPECT_FALSE(channel_quads_fit(bad));
  bad = op;
  bad.y16 = h_quad + 2;  // 4 bytes in: off 8 bytes
  EXPECT_FALSE(channel_quads_fit(bad));
}

TEST(CodecStreamKernels, AttentionWindowStartsAtTheWindowOrZero) {
  EXPECT_EQ(window_first(0, 72), 0);
  EXPECT_EQ(window_first(71, 72), 0);
  EXPECT_EQ(window_first(72, 72), 1);
  EXPECT_EQ(window_first(200, 72), 129);
}

}  // namespace
}  // namespace chorus::cuda::codec_ops
