// Attention over a paged KV cache (ops.h KvLayer with a page table) against the same attention over
// a contiguous cache, bit for bit: the decode kernels (the long-context cluster kernel, the many-row
// kernel and the general one, f32 and bf16, at page boundaries) and the prefill path
// (QK-norm/rope/store, then causal attention over rows that span pages). Paging changes only where
// rows live, so outputs and the stored rows must be identical. A page table off by one page must
// make them differ.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "gpu_test_util.h"
#include "nn/kv_pages.h"

namespace chorus::gpu_test {
namespace {

constexpr int64_t P = nn::kKvPagePositions;

// One layer's caches of S sequences of `cap` positions, contiguous ([S, cap, kvw] keys, values) and
// paged: pages of [P, kvw] keys then [P, kvw] values in a pool of more pages than needed, handed
// out in a shuffled order. `shift_by_one` plants a table bug: each sequence's page index i maps
// the page of index i + 1 (the last one a spare page).
struct PagedCaches {
  int64_t S, cap, kvw, pages;
  cuda::DeviceBuffer k, v;          // contiguous
  cuda::DeviceBuffer pool, table;   // paged
  std::vector<int32_t> page_of;     // [S · cap / P] pool page of each (sequence, page index)
  cuda::KvLayer contiguous() const { return {k.as<float>(), v.as<float>(), cap * kvw, cap}; }
  cuda::KvLayer paged() const {
    cuda::KvLayer l;
    l.capacity = cap;
    l.pages = table.as<float* const>();
    l.page_shift = nn::kKvPageShift;
    l.k_page = 0;
    l.v_page = P * kvw;
    return l;
  }
  // The paged caches copied back into the contiguous layout, keys then values.
  std::pair<std::vector<float>, std::vector<float>> gathered() const {
    const std::vector<float> all = to_host<float>(pool, static_cast<size_t>(pages * 2 * P * kvw));
    std::vector<float> gk(static_cast<size_t>(S * cap * kvw)), gv(gk.size());
    for (int64_t s = 0; s < S; ++s)
      for (int64_t t = 0; t < cap; ++t) {
        const int64_t page = page_of[static_cast<size_t>(s * (cap / P) + t / P)];
        const float* src = all.data() + page * 2 * P * kvw + (t % P) * kvw;
        std::copy(src, src + kvw, gk.begin() + (s * cap + t) * kvw);
        std::copy(src + P * kvw, src + P * kvw + kvw, gv.begin() + (s * cap + t) * kvw);
      }
    return {gk, gv};
  }
};

PagedCaches make_caches(std::mt19937& rng, int64_t S, int64_t cap, int64_t kvw, bool shift_by_one = false) {
  PagedCaches c;
  c.S = S;
  c.cap = cap;
  c.kvw = kvw;
  const int64_t per_seq = cap / P;
  c.pages = S * per_seq + 3;  // spares, never mapped (or mapped by the planted bug)
  const auto k0 = random_vec(rng, static_cast<size_t>(S * cap * kvw), -1.5f, 1.5f);
  const auto v0 = random_vec(rng, static_cast<size_t>(S * cap * kvw), -1.5f, 1.5f);
  c.k = to_device(k0);
  c.v = to_device(v0);
  std::vector<int32_t> order(static_cast<size_t>(c.pages));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  c.page_of.assign(order.begin(), order.begin() + S * per_seq);
  std::vector<float> pool = random_vec(rng, static_cast<size_t>(c.pages * 2 * P * kvw), -9.0f, 9.0f);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = 0; t < cap; ++t) {
      const int64_t page = c.page_of[static_cast<size_t>(s * per_seq + t / P)];
      float* dst = pool.data() + page * 2 * P * kvw + (t % P) * kvw;
      std::copy(k0.begin() + (s * cap + t) * kvw, k0.begin() + (s * cap + t + 1) * kvw, dst);
      std::copy(v0.begin() + (s * cap + t) * kvw, v0.begin() + (s * cap + t + 1) * kvw, dst + P * kvw);
    }
  c.pool = to_device(pool);
  std::vector<float*> table;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t i = 0; i < per_seq; ++i) {
      const int64_t j = shift_by_one ? i + 1 : i;
      const int64_t page = j < per_seq ? c.page_of[static_cast<size_t>(s * per_seq + j)] : c.pages - 1;
      table.push_back(c.pool.as<float>() + page * 2 * P * kvw);
    }
  c.table = to_device(table);
  return c;
}

struct Shape {
  int64_t Hq, Hkv, D, cap;
};

struct Norms {
  cuda::DeviceBuffer qn, kn, inv;
  explicit Norms(std::mt19937& rng, int64_t D) {
    qn = to_device(random_vec(rng, static_cast<size_t>(D), 0.5f, 1.5f));
    kn = to_device(random_vec(rng, static_cast<size_t>(D), 0.5f, 1.5f));
    std::vector<float> f(static_cast<size_t>(D / 2));
    cpu::rope_inv_freq(1e6f, D, f.data());
    inv = to_device(f);
  }
};

// One decode row per sequence at `pos` (sequences in the order 2, 0, 1) through attention_decode on
// both caches. Returns whether outputs and caches were identical.
bool decode_equal(const Shape& sh, const std::vector<int32_t>& pos, bool bf16, bool planted, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t S = 3, qw = sh.Hq * sh.D, kvw = sh.Hkv * sh.D, ld = qw + 2 * kvw;
  PagedCaches c = make_caches(rng, S, sh.cap, kvw, planted);
  const Norms nm(rng, sh.D);
  const auto dqkv = to_device(random_vec(rng, static_cast<size_t>(S * ld), -2.0f, 2.0f));
  const auto dseq = to_device(std::vector<int32_t>{2, 0, 1}), dpos = to_device(pos);
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.D));
  std::vector<float> out[2];
  for (int paged = 0; paged < 2; ++paged) {
    auto dout = poisoned(static_cast<size_t>(S * qw));
    const Status st = cuda::attention_decode(dqkv.as<float>(), ld, {sh.Hq, sh.Hkv, sh.D}, nm.qn.as<float>(),
                                             nm.kn.as<float>(), 1e-6f, nm.inv.as<float>(), scale,
                                             {dseq.as<int32_t>(), dpos.as<int32_t>(), S, true},
                                             paged ? c.paged() : c.contiguous(), dout.as<float>(), nullptr, bf16);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    out[paged] = to_host<float>(dout, static_cast<size_t>(S * qw));
  }
  const auto [gk, gv] = c.gathered();
  const size_t n = static_cast<size_t>(S * sh.cap * kvw);
  const bool caches = gk == to_host<float>(c.k, n) && gv == to_host<float>(c.v, n);
  EXPECT_FALSE(std::any_of(out[0].begin(), out[0].end(), [](float x) { return std::isnan(x); }));
  return out[0] == out[1] && caches;
}

void check_decode(const Shape& sh, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "Hq " << sh.Hq << " Hkv " << sh.Hkv << " D " << sh.D << " capacity " << sh.cap);
  ASSERT_TRUE(cuda::attention_reserve(sh.cap, sh.D).ok());
  const int32_t last = static_cast<int32_t>(sh.cap - 1);
  const std::vector<std::vector<int32_t>> positions = {
      {0, 1, 2}, {P - 1, P, P + 1}, {2 * P - 1, 2 * P, last}, {last, 37, 2 * P + 5}};
  for (const auto& pos : positions)
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE(testing::Message() << "positions " << pos[0] << " " << pos[1] << " " << pos[2]
                                      << (bf16 ? " bf16" : " f32"));
      EXPECT_TRUE(decode_equal(sh, pos, bf16, false, seed++));
    }
}

TEST(GpuPagedAttention, DecodeOverPagesEqualsTheContiguousCache) {
  REQUIRE_GPU();
  check_decode({16, 8, 128, 4 * P}, 51);  // the long-context cluster kernel (talker and backbone shape)
  check_decode({4, 2, 64, 3 * P}, 52);    // the general fused kernel
  cuda::set_long_attention(false);
  check_decode({16, 8, 128, 4 * P}, 53);  // the general kernel at the talker's shape
  cuda::set_long_attention(true);
  for (const int w : {1, 4, cuda::kRowAttentionGroup4}) {  // the many-row kernels
    cuda::set_row_attention(w);
    check_decode({16, 8, 128, 4 * P}, 54 + w);
  }
  cuda::set_row_attention(cuda::kRowAttentionAuto);
}

// The planted bug: each page index maps the next page. Rows past the first page then read (and
// store into) the wrong page, and the comparison above catches it.
TEST(GpuPagedAttention, ATableOffByOnePageIsCaught) {
  REQUIRE_GPU();
  const Shape sh{16, 8, 128, 4 * P};
  ASSERT_TRUE(cuda::attention_reserve(sh.cap, sh.D).ok());
  EXPECT_TRUE(decode_equal(sh, {P + 3, 2 * P, 3 * P + 1}, false, false, 61));
  EXPECT_FALSE(decode_equal(sh, {P + 3, 2 * P, 3 * P + 1}, false, true, 61));
  EXPECT_FALSE(decode_equal(sh, {P + 3, 2 * P, 3 * P + 1}, true, true, 62));
  for (const int w : {1, 4, cuda::kRowAttentionGroup4}) {
    cuda::set_row_attention(w);
    EXPECT_FALSE(decode_equal(sh, {P + 3, 2 * P, 3 * P + 1}, false, true, 63)) << "many-row kernel, variant " << w;
  }
  cuda::set_row_attention(cuda::kRowAttentionAuto);
}

// The prefill: every sequence's rows 0..len−1 (spanning pages) through qk_norm_rope_store and the
// causal attention, then one decode row each, on both caches.
void check_prefill(const Shape& sh, bool bf16, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << "Hq " << sh.Hq << " Hkv " << sh.Hkv << " D " << sh.D << (bf16 ? " bf16" : " f32"));
  std::mt19937 rng(seed);
  const int64_t S = 3, qw = sh.Hq * sh.D, kvw = sh.Hkv * sh.D, ld = qw + 2 * kvw;
  ASSERT_TRUE(cuda::attention_reserve(sh.cap, sh.D).ok());
  PagedCaches c = make_caches(rng, S, sh.cap, kvw);
  const Norms nm(rng, sh.D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(sh.D));
  const int64_t len[S] = {2 * P + 7, 1, P};
  std::vector<int32_t> seq, pos;
  for (int64_t s = 0; s < S; ++s)
    for (int64_t t = 0; t < len[s]; ++t) {
      seq.push_back(static_cast<int32_t>(s));
      pos.push_back(static_cast<int32_t>(t));
    }
  const int64_t R = static_cast<int64_t>(seq.size());
  const auto dqkv = to_device(random_vec(rng, static_cast<size_t>(R * ld), -2.0f, 2.0f));
  const auto dseq = to_device(seq), dpos = to_device(pos);
  const cuda::RowMap map{dseq.as<int32_t>(), dpos.as<int32_t>(), R, false};
  const cuda::HeadShape shape{sh.Hq, sh.Hkv, sh.D};
  std::vector<float> out[2];
  for (int paged = 0; paged < 2; ++paged) {
    const cuda::KvLayer kv = paged ? c.paged() : c.contiguous();
    auto dq = poisoned(static_cast<size_t>(R * qw)), dout = poisoned(static_cast<size_t>(R * qw));
    ASSERT_TRUE(cuda::qk_norm_rope_store(dqkv.as<float>(), ld, shape, nm.qn.as<float>(), nm.kn.as<float>(), 1e-6f,
                                         nm.inv.as<float>(), map, kv, dq.as<float>(), nullptr, bf16)
                    .ok());
    ASSERT_TRUE(cuda::attention(dq.as<float>(), shape, scale, map, kv, dout.as<float>(), nullptr, bf16).ok());
    out[paged] = to_host<float>(dout, static_cast<size_t>(R * qw));
  }
  EXPECT_EQ(out[1], out[0]) << "prefill attention";
  const size_t n = static_cast<size_t>(S * sh.cap * kvw);
  const auto [gk, gv] = c.gathered();
  EXPECT_EQ(gk, to_host<float>(c.k, n)) << "stored keys";
  EXPECT_EQ(gv, to_host<float>(c.v, n)) << "stored values";
  EXPECT_FALSE(std::any_of(out[0].begin(), out[0].end(), [](float x) { return std::isnan(x); }));
}

TEST(GpuPagedAttention, PrefillOverPagesEqualsTheContiguousCache) {
  REQUIRE_GPU();
  for (const bool bf16 : {false, true}) {
    check_prefill({16, 8, 128, 4 * P}, bf16, 71);
    check_prefill({4, 2, 16, 3 * P}, bf16, 72);  // the tiny goldens' shape
  }
}

}  // namespace
}  // namespace chorus::gpu_test
