// The codec GEMM's wide bf16 tiles (runtime/cuda/codec_gemm_wide.h) run on the CPU: every thread of
// every block fetches its quads and stores them rounded to bf16 through the header's functions,
// every lane gives the header's ldmatrix addresses, and ldmatrix (plain and .trans) and the mma are
// emulated here from the PTX ISA, written out independently of the header. Checked: the fragments
// ldmatrix delivers are the mma.m16n8k16 fragments of the tile, the reads hit 32 distinct banks,
// and the whole data flow gives exactly the bf16 contract on the model arithmetic
// (codec_gemm_model.h) for both wide tiles, all four transposes, ragged edges, both load widths
// and chunk groups; and the policy picks the wide tiles for the codec's large products.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "codec_gemm_grid.h"
#include "codec_gemm_model.h"
#include "runtime/cuda/codec_gemm_wide.h"

namespace chorus::cuda::codec_ops {
namespace {

using namespace gemm_model;

uint16_t bf16_bits(float x) { return static_cast<uint16_t>(bits(bf16_reference(x)) >> 16); }

float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).b16 per the PTX ISA: lane 8·j + r addresses row r of
// matrix j; lane l receives in register j the elements (l / 4, 2·(l % 4)) and (l / 4, 2·(l % 4) + 1)
// of matrix j, or with .trans (2·(l % 4), l / 4) and (2·(l % 4) + 1, l / 4); the first in the low
// half. out[lane][2·j + h] is the value of half h of register j.
void ldmatrix_model(const std::vector<uint16_t>& smem, const int (&addr)[32], bool trans, float (&out)[32][8]) {
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < 4; ++j)
      for (int h = 0; h < 2; ++h) {
        const int row = trans ? 2 * (lane % 4) + h : lane / 4, col = trans ? lane / 4 : 2 * (lane % 4) + h;
        out[lane][2 * j + h] = from_bf16(smem[static_cast<size_t>(addr[8 * j + row] + col)]);
      }
}

// A stage whose every value is its own label (a 16-bit pattern naming operand, row and column, read
// back as bits), laid out by the header's padded row lengths; padding 0xffff.
template <class T, bool TA, bool TB>
std::vector<uint16_t> labelled_stage(int64_t (*label)(bool, int, int)) {
  using S = WideStage<T, TA, TB>;
  std::vector<uint16_t> st(static_cast<size_t>(S::elems), 0xffffu);
  for (int o = 0; o < S::a_outer; ++o)
    for (int i = 0; i < S::a_inner; ++i) st[static_cast<size_t>(o * S::a_ld + i)] = static_cast<uint16_t>(label(false, o, i));
  for (int o = 0; o < S::b_outer; ++o)
    for (int i = 0; i < S::b_inner; ++i)
      st[static_cast<size_t>(S::a_elems + o * S::b_ld + i)] = static_cast<uint16_t>(label(true, o, i));
  return st;
}

// A label that encodes (operand, outer, inner) in 16 bits: outer and inner stay under 128.
int64_t label_of(bool b, int o, int i) { return (b ? 0x8000 : 0) | (o << 7) | i; }

template <class T, bool TA, bool TB>
void expect_fragments() {
  SCOPED_TRACE("BM=" + std::to_string(T::BM) + " ta=" + std::to_string(TA) + " tb=" + std::to_string(TB));
  const std::vector<uint16_t> st = labelled_stage<T, TA, TB>(label_of);
  // The label an (m, k) of A or a (k, n) of B carries, by where the layout stores it.
  auto a_label = [](int m, int k) { return TA ? label_of(false, k, m) : label_of(false, m, k); };
  auto b_label = [](int k, int n) { return TB ? label_of(true, n, k) : label_of(true, k, n); };
  auto label = [](float x) {
    uint32_t u = bits(x) >> 16;
    return static_cast<int64_t>(u);
  };
  int checked = 0;
  for (int row0 = 0; row0 < T::BM; row0 += 16)
    for (int kk = 0; kk < T::BK; kk += 16) {
      int addr[32];
      for (int lane = 0; lane < 32; ++lane) addr[lane] = wide_a_lane<T, TA, TB>(lane, row0, kk);
      for (int j = 0; j < 4; ++j) {
        std::set<int> phase;
        for (int r = 0; r < 8; ++r) {
          ASSERT_EQ(addr[8 * j + r] % 8, 0) << "rows start on 16 bytes";
          for (int w = 0; w < 4; ++w) phase.insert((addr[8 * j + r] / 2 + w) % 32);
        }
        EXPECT_EQ(phase.size(), 32u) << "A matrix " << j << " reads conflict";
      }
      float frag[32][8];
      ldmatrix_model(st, addr, TA, frag);
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i)
          for (int h = 0; h < 2; ++h) {
            int r, k;
            mma16_a_at(lane, i, h, r, k);
            // the PTX figure of the A fragment, written out: row g + 8·(i & 1), k 2·t + h + 8·(i >> 1)
            ASSERT_EQ(r, lane / 4 + 8 * (i & 1));
            ASSERT_EQ(k, 2 * (lane % 4) + h + 8 * (i >> 1));
            ASSERT_EQ(label(frag[lane][2 * i + h]) & 0xffff, a_label(row0 + r, kk + k) & 0xffff);
            ++checked;
          }
    }
  for (int col0 = 0; col0 < T::BN; col0 += 16)
    for (int kk = 0; kk < T::BK; kk += 16) {
      int addr[32];
      for (int lane = 0; lane < 32; ++lane) addr[lane] = wide_b_lane<T, TA, TB>(lane, col0, kk);
      for (int j = 0; j < 4; ++j) {
        std::set<int> phase;
        for (int r = 0; r < 8; ++r) {
          ASSERT_EQ(addr[8 * j + r] % 8, 0);
          for (int w = 0; w < 4; ++w) phase.insert((addr[8 * j + r] / 2 + w) % 32);
        }
        EXPECT_EQ(phase.size(), 32u) << "B matrix " << j << " reads conflict";
      }
      float frag[32][8];
      ldmatrix_model(st, addr, !TB, frag);
      for (int lane = 0; lane < 32; ++lane)
        for (int t = 0; t < 2; ++t)
          for (int i = 0; i < 2; ++i)
            for (int h = 0; h < 2; ++h) {
              // the PTX figure of the B fragment: k 2·t + h + 8·i, column g
              const int k = 2 * (lane % 4) + h + 8 * i, n = lane / 4 + 8 * t;
              ASSERT_EQ(label(frag[lane][4 * t + 2 * i + h]) & 0xffff, b_label(kk + k, col0 + n) & 0xffff);
              ++checked;
            }
    }
  EXPECT_EQ(checked, 32 * 8 * (T::BM / 16) * (T::BK / 16) + 32 * 8 * (T::BN / 16) * (T::BK / 16));
}

TEST(CodecGemmWide, LdmatrixDeliversTheMmaFragmentsWithoutBankConflicts) {
  expect_fragments<GemmWide, false, false>();
  expect_fragments<GemmWide, true, false>();
  expect_fragments<GemmWide, false, true>();
  expect_fragments<GemmWide, true, true>();
  expect_fragments<GemmWide64, false, false>();
  expect_fragments<GemmWide64, true, true>();
  expect_fragments<GemmWide16, false, false>();
  expect_fragments<GemmWide16x64, false, false>();
}

// cp.async on the host: copies src_bytes and zero-fills the rest of `bytes`. Counts 16-byte
// copies whose destination (in the ring) or source is not 16-byte aligned (the device would fault).
struct RingCopy {
  const float* ring = nullptr;
  int misaligned = 0, vector_copies = 0, inside = 0;
  void operator()(float* dst, const float* src, int bytes, int src_bytes) {
    ASSERT_TRUE(bytes == 16 || bytes == 4);
    ASSERT_TRUE(src_bytes >= 0 && src_bytes <= bytes && src_bytes % 4 == 0);
    if (bytes == 16) {
      ++vector_copies;
      if ((dst - ring) % 4 != 0 || (src_bytes > 0 && (reinterpret_cast<uintptr_t>(src) & 15u) != 0)) ++misaligned;
    }
    if (src_bytes > 0) std::memcpy(dst, src, static_cast<size_t>(src_bytes));
    std::memset(reinterpret_cast<char*>(dst) + src_bytes, 0, static_cast<size_t>(bytes - src_bytes));
  }
};

// The kernel on the host (run_grid walks the blocks, chunk ends and stores): per stage every
// thread's quads copied to its ring slots and stored rounded (ring and buffer first filled with
// NaN, so that a read of a value no copy or store wrote shows), then every warp's k-steps through
// the header's ldmatrix addresses, the mma on the model.
template <class T, bool TA, bool TB>
std::vector<float> emulate(const Problem& p, bool allow_vectors, int64_t group, RingCopy& copy, int& misaligned) {
  using S = WideStage<T, TA, TB>;
  std::vector<uint16_t> stage(static_cast<size_t>(S::elems));
  std::vector<float> ring(static_cast<size_t>(T::kStages * S::quads * T::kThreads * 4));
  copy.ring = ring.data();
  const bool va = allow_vectors && gemm_vector_ok(p.A.data(), p.lda);
  const bool vb = allow_vectors && gemm_vector_ok(p.B.data(), p.ldb);
  auto fill = [&](const GemmArgs& g, int64_t m0, int64_t n0, int64_t k0, int64_t kb, int64_t ke) {
    std::fill(stage.begin(), stage.end(), uint16_t{0x7fc1});
    std::fill(ring.begin(), ring.end(), NAN);
    const int slot = static_cast<int>((k0 - kb) / T::BK % T::kStages);
    for (int tid = 0; tid < T::kThreads; ++tid)
      for (bool b : {false, true})
        for (int q = 0; q < (b ? S::b_quads : S::a_quads); ++q) {
          const int r = wide_ring_at<T, TA, TB>(slot, b, tid, q);
          if (wide_stage_inside<T>(g, m0, n0, k0, ke, va, vb)) {
            wide_copy_inside<T, TA, TB>(g, b, m0, n0, k0, tid, q, ring.data() + r, copy);
            ++copy.inside;
          } else {
            wide_copy<T, TA, TB>(g, b, m0, n0, k0, ke, tid, q, b ? vb : va, ring.data() + r, copy);
          }
          const int at = wide_store_at<T, TA, TB>(b, tid, q);
          misaligned += at % 4 != 0;  // the device stores 8 bytes
          for (int e = 0; e < 4; ++e) stage[static_cast<size_t>(at + e)] = bf16_bits(ring[static_cast<size_t>(r + e)]);
        }
  };
  auto multiply = [&](int row0, int col0, int steps, WarpAcc<T>& acc) {
    for (int ks = 0; ks < steps; ++ks) {
      float a[T::MT][32][8], b[T::NT][32][4];
      for (int i = 0; i < T::MT; ++i) {
        int addr[32];
        for (int lane = 0; lane < 32; ++lane) addr[lane] = wide_a_lane<T, TA, TB>(lane, row0 + 16 * i, 16 * ks);
        ldmatrix_model(stage, addr, TA, a[i]);
      }
      for (int j = 0; j < T::NT; j += 2) {
        int addr[32];
        float r[32][8];
        for (int lane = 0; lane < 32; ++lane) addr[lane] = wide_b_lane<T, TA, TB>(lane, col0 + 8 * j, 16 * ks);
        ldmatrix_model(stage, addr, !TB, r);
        for (int lane = 0; lane < 32; ++lane)
          for (int e = 0; e < 4; ++e) {
            b[j][lane][e] = r[lane][e];
            b[j + 1][lane][e] = r[lane][4 + e];
          }
      }
      for (int i = 0; i < T::MT; ++i)
        for (int j = 0; j < T::NT; ++j) mma16_model(acc.v[i][j], a[i], b[j]);
    }
  };
  return run_grid<T>(p, GemmPrecision::kBf16, group, fill, multiply);
}

template <class T>
std::vector<float> emulate_any(const Problem& p, bool allow_vectors, RingCopy& copy, int64_t group = 0) {
  int misaligned = 0;
  std::vector<float> C;
  if (p.ta && p.tb)
    C = emulate<T, true, true>(p, allow_vectors, group, copy, misaligned);
  else if (p.ta)
    C = emulate<T, true, false>(p, allow_vectors, group, copy, misaligned);
  else if (p.tb)
    C = emulate<T, false, true>(p, allow_vectors, group, copy, misaligned);
  else
    C = emulate<T, false, false>(p, allow_vectors, group, copy, misaligned);
  EXPECT_EQ(misaligned + copy.misaligned, 0);
  return C;
}

template <class T>
void check_tile(const char* name, const std::vector<Shape>& shapes, uint32_t seed) {
  int inside_cases = 0;
  check_tile_cases<RingCopy>(
      name, GemmPrecision::kBf16, shapes, seed,
      [](const Problem& p, RingCopy& copy, int64_t group) { return emulate_any<T>(p, true, copy, group); },
      [&](const RingCopy& copy) { inside_cases += copy.inside > 0; });
  EXPECT_GT(inside_cases, 0);  // the unchecked copies of whole stages were exercised too
}

// Every thread's quads of every slot have their own 16 bytes of the ring, and the ring and the
// buffers fit the block's shared memory.
template <class T, bool TA, bool TB>
void expect_ring_partition() {
  using S = WideStage<T, TA, TB>;
  std::vector<int> seen(static_cast<size_t>(T::kStages * S::quads * T::kThreads), 0);
  for (int slot = 0; slot < T::kStages; ++slot)
    for (int tid = 0; tid < T::kThreads; ++tid)
      for (bool b : {false, true})
        for (int q = 0; q < (b ? S::b_quads : S::a_quads); ++q) {
          const int at = wide_ring_at<T, TA, TB>(slot, b, tid, q);
          ASSERT_EQ(at % 4, 0);
          ASSERT_GE(at, 0);
          ASSERT_LT(at / 4, static_cast<int>(seen.size()));
          ++seen[static_cast<size_t>(at / 4)];
        }
  for (int n : seen) ASSERT_EQ(n, 1);
  EXPECT_LE(S::smem_bytes, 227u * 1024u);
}

TEST(CodecGemmWide, EachQuadHasItsOwnRingSlot) {
  expect_ring_partition<GemmWide, false, false>();
  expect_ring_partition<GemmWide, true, true>();
  expect_ring_partition<GemmWide64, false, true>();
  expect_ring_partition<GemmWide64, true, false>();
}

// gemm_bf16_operands' staging: every thread's chunks of a stage, copied as cp.async would, leave
// the buffer holding A's and B's tiles exactly as stored (zero past M, N and the group's k), each
// 16 bytes written once and the padding untouched, for inner and edge blocks and stages.
template <class T>
void expect_wide16_stage() {
  using S = WideStage<T, false, false>;
  const int64_t M = T::BM + 2, N = T::BN + 8, K = 1032;
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> bits16(0, 0xfffe);
  std::vector<uint16_t> A(static_cast<size_t>(M * K)), B(static_cast<size_t>(K * N));
  for (uint16_t& x : A) x = static_cast<uint16_t>(bits16(rng));
  for (uint16_t& x : B) x = static_cast<uint16_t>(bits16(rng));
  GemmArgs g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A16 = A.data();
  g.lda = K;
  g.B16 = B.data();
  g.ldb = N;
  int checked = 0;
  for (int64_t m0 : {int64_t{0}, int64_t{T::BM}})
    for (int64_t n0 : {int64_t{0}, int64_t{T::BN}})
      for (int64_t k0 : {int64_t{0}, int64_t{1024}}) {
        std::vector<uint16_t> st(static_cast<size_t>(S::elems), 0xdeadu);
        std::vector<int> writes(static_cast<size_t>(S::elems / 8), 0);
        auto copy = [&](uint16_t* dst, const uint16_t* src, int bytes, int src_bytes) {
          ASSERT_EQ(bytes, 16);
          ASSERT_TRUE(src_bytes == 0 || src_bytes == 16);
          ASSERT_EQ((dst - st.data()) % 8, 0) << "16-byte aligned destination";
          if (src_bytes) {
            const bool in_a = src >= A.data() && src < A.data() + A.size();
            ASSERT_EQ((src - (in_a ? A.data() : B.data())) % 8, 0) << "16-byte aligned source";
          }
          ++writes[static_cast<size_t>((dst - st.data()) / 8)];
          for (int e = 0; e < 8; ++e) dst[e] = src_bytes ? src[e] : 0;
        };
        for (int tid = 0; tid < T::kThreads; ++tid) {
          for (int q = 0; q < Wide16Stage<T>::a_chunks; ++q) wide16_copy<T>(g, false, m0, n0, k0, K, tid, q, st.data(), copy);
          for (int q = 0; q < Wide16Stage<T>::b_chunks; ++q) wide16_copy<T>(g, true, m0, n0, k0, K, tid, q, st.data(), copy);
        }
        for (int r = 0; r < T::BM; ++r)
          for (int k = 0; k < S::a_ld; ++k) {
            const uint16_t got = st[static_cast<size_t>(r * S::a_ld + k)];
            if (k >= T::BK) {
              ASSERT_EQ(got, 0xdeadu);
              continue;
            }
            const bool in = m0 + r < M && k0 + k < K;
            ASSERT_EQ(got, in ? A[static_cast<size_t>((m0 + r) * K + k0 + k)] : 0) << "A " << r << ", " << k;
            ++checked;
          }
        for (int k = 0; k < T::BK; ++k)
          for (int n = 0; n < S::b_ld; ++n) {
            const uint16_t got = st[static_cast<size_t>(S::a_elems + k * S::b_ld + n)];
            if (n >= T::BN) {
              ASSERT_EQ(got, 0xdeadu);
              continue;
            }
            const bool in = k0 + k < K && n0 + n < N;
            ASSERT_EQ(got, in ? B[static_cast<size_t>((k0 + k) * N + n0 + n)] : 0) << "B " << k << ", " << n;
            ++checked;
          }
        int tile_slots = 0;
        for (int w : writes) {
          ASSERT_LE(w, 1);
          tile_slots += w;
        }
        EXPECT_EQ(tile_slots * 8, T::BM * T::BK + T::BK * T::BN);
      }
  EXPECT_EQ(checked, 8 * (T::BM * T::BK + T::BK * T::BN));
}

TEST(CodecGemmWide, Bf16OperandChunksFillTheStageAsStored) {
  expect_wide16_stage<GemmWide16>();
  expect_wide16_stage<GemmWide16x64>();
}

// What gemm_bf16_operands takes: the wide tiles' products with K and N multiples of 8.
TEST(CodecGemmWide, Bf16OperandsTakeTheWideProductsOfWholeChunks) {
  EXPECT_TRUE(gemm_bf16_operands_fit(96, 245760, 672, 132));
  EXPECT_TRUE(gemm_bf16_operands_fit(768, 4096, 5376, 132));
  EXPECT_FALSE(gemm_bf16_operands_fit(768, 4100, 5376, 132));  // N off a multiple of 8
  EXPECT_FALSE(gemm_bf16_operands_fit(768, 4096, 5372, 132));  // K likewise
  EXPECT_FALSE(gemm_bf16_operands_fit(768, 32, 5376, 132));    // a thin product
  EXPECT_FALSE(gemm_bf16_operands_fit(1, 245760, 672, 132));   // one row: thin
}

// Ragged edges against the tile in M and N, K within a chunk and not a multiple of the stage
// depth or of 16, over several chunks with a short last one, and K = 0 (C = beta·C0).
TEST(CodecGemmWide, WideTilesFollowTheContract) {
  check_tile<GemmWide>("wide", {{130, 129, 67}, {128, 128, 32}, {20, 140, 531}, {3, 5, 0}}, 60);
}

TEST(CodecGemmWide, Wide64TilesFollowTheContract) {
  check_tile<GemmWide64>("wide64", {{70, 131, 45}, {64, 128, 1030}, {5, 9, 16}}, 70);
}

// What the bf16 policy launches for the codec's products at 128 streams on 132 SMs (the table of
// codec_gemm_tiles.h): the vocoder's convolutions and the transposed conv on wide tiles, few rows
// or columns on the thin ones.
TEST(CodecGemmWide, PolicyPutsTheLargeProductsOnWideTiles) {
  const int64_t sms = 132;
  auto tile = [&](int64_t M, int64_t N, int64_t K) { return gemm_auto_tile_bf16(M, N, gemm_chunks(K), sms); };
  EXPECT_EQ(tile(12288, 512, 1536), GemmTile::kWide);      // block 1 conv_t
  EXPECT_EQ(tile(768, 4096, 5376), GemmTile::kWide64);     // block 1 conv1: 192 wide tiles, under 2·132
  EXPECT_EQ(tile(384, 20480, 2688), GemmTile::kWide);      // block 2 conv1
  EXPECT_EQ(tile(192, 81920, 1344), GemmTile::kWide64);    // block 3 conv1: 128-row tiles would pad 192 to 256
  EXPECT_EQ(tile(96, 245760, 672), GemmTile::kWide);       // block 4 conv1
  EXPECT_EQ(tile(1, 245760, 672), GemmTile::kThin32);      // conv_out: one row
  EXPECT_EQ(tile(1024, 1, 7168), GemmTile::kThin8);        // one stream's pre_conv
  EXPECT_EQ(tile(768, 32, 5376), GemmTile::kThin16);       // one stream's block 1 conv1: 32 columns
}

}  // namespace
}  // namespace chorus::cuda::codec_ops
