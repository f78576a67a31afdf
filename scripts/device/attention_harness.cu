// Times the long-cache decode attention (talker shape: 16 query heads, 8 kv heads, head size 128,
// paged caches as the serving pools keep them) at many row counts and context lengths, the cluster
// kernel against the many-row kernels (1 and 4 warps per query head, one and four warps per kv
// group), and checks that all give the same outputs bit for bit; then prefill rows (whole prompts)
// against the general kernel.
// Printed per (rows, keys): µs per call of each, and what the default picks. With the argument
// `serving`, decode rows from 64 on only.
//
// Build here, after `ninja -C build chorus`:
//   nvcc -DCHORUS_HAVE_CUDA=1 -Isrc -O3 -arch=sm_90 -std=c++20 --extended-lambda \
//     scripts/device/attention_harness.cu -o .devcarry/probe/attention_harness \
//     build/src/libchorus_cuda.a build/src/libchorus_runtime.a build/src/libchorus_core.a -lcublas -lcurl -lcrypto
// then run .devcarry/probe/attention_harness on the GPU machine (carry .devcarry/probe).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "nn/kv_pages.h"
#include "runtime/cuda/ops.h"
#include "harness_util.h"

using namespace chorus;
using namespace chorus::cuda;
using chorus::harness::alloc;
using chorus::harness::must;

namespace {

__global__ void fill_kernel(float* x, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    x[i] = (static_cast<float>(h & 0xffff) / 65536.0f - 0.5f) * scale;
  }
}
void fill(DeviceBuffer& b, size_t n, uint32_t seed, float scale) {
  fill_kernel<<<512, 256>>>(b.as<float>(), n, seed, scale);
  must(cudaGetLastError(), "fill");
}

}  // namespace

int main(int argc, char** argv) {
  // `serving`: decode rows at the serving pools' counts only (64 rows and more), a shorter run.
  const bool serving = argc > 1 && std::strcmp(argv[1], "serving") == 0;
  const int64_t Hq = 16, Hkv = 8, D = 128, cap = 1024, P = nn::kKvPagePositions;
  const int64_t qw = Hq * D, kvw = Hkv * D, ld = qw + 2 * kvw, per_seq = cap / P;
  const int64_t max_rows = 1024;
  must(attention_reserve(cap, D), "reserve");
  // One page pool holding every sequence's pages (pages of [P, kvw] keys then values).
  const size_t page_floats = static_cast<size_t>(2 * P * kvw);
  DeviceBuffer pool = alloc(max_rows * per_seq * page_floats * sizeof(float));
  fill(pool, max_rows * per_seq * page_floats, 7, 3.0f);
  std::vector<float*> table;
  for (int64_t s = 0; s < max_rows; ++s)
    for (int64_t i = 0; i < per_seq; ++i) table.push_back(pool.as<float>() + (s * per_seq + i) * page_floats);
  DeviceBuffer dtable = alloc(table.size() * sizeof(float*));
  must(cudaMemcpy(dtable.as<void>(), table.data(), table.size() * sizeof(float*), cudaMemcpyHostToDevice), "table");
  KvLayer kv;
  kv.capacity = cap;
  kv.pages = dtable.as<float* const>();
  kv.page_shift = nn::kKvPageShift;
  kv.k_page = 0;
  kv.v_page = P * kvw;
  DeviceBuffer qkv = alloc(max_rows * ld * sizeof(float)), qn = alloc(D * 4), kn = alloc(D * 4), inv = alloc(D * 2);
  fill(qkv, max_rows * ld, 3, 4.0f);
  fill(qn, D, 4, 0.5f);
  fill(kn, D, 5, 0.5f);
  std::vector<float> f(D / 2);
  for (int64_t i = 0; i < D / 2; ++i) f[i] = std::pow(1e6f, -2.0f * i / D);
  must(cudaMemcpy(inv.as<void>(), f.data(), f.size() * 4, cudaMemcpyHostToDevice), "inv");
  constexpr int kVariants = 5;  // cluster, W = 1, 4, four warps per kv group, the default
  const int variant_w[kVariants] = {0, 1, 4, kRowAttentionGroup4, kRowAttentionAuto};
  std::vector<DeviceBuffer> out;
  for (int k = 0; k < kVariants; ++k) out.push_back(alloc(max_rows * qw * 4));
  DeviceBuffer seqs = alloc(max_rows * 4), poss = alloc(max_rows * 4);
  std::vector<int32_t> seq(max_rows);
  for (int64_t s = 0; s < max_rows; ++s) seq[s] = static_cast<int32_t>(s);
  must(cudaMemcpy(seqs.as<void>(), seq.data(), max_rows * 4, cudaMemcpyHostToDevice), "seqs");
  cudaEvent_t e0, e1;
  must(cudaEventCreate(&e0), "event");
  must(cudaEventCreate(&e1), "event");
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Prefill rows: whole prompts of `keys` positions (sequence r / keys, position r % keys), queries
  // formed, every key in the cache; the first column is then the general kernel.
  DeviceBuffer prompt_seqs = alloc(max_rows * 4);
  for (const bool prefill : {false, true}) {
  std::printf("%s\n%6s %6s %10s %10s %10s %10s %10s %s\n", prefill ? "prefill rows" : "decode rows", "rows", "keys",
              prefill ? "general" : "cluster", "w1", "w4", "group4", "default", "equal (µs per call)");
  for (int64_t keys : {40, 120, 250, 500, 1000}) {
    for (int64_t rows : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}) {
      if (serving && (prefill || rows < 64)) continue;
      // Decode: positions spread around `keys` (±25 %), as streams of one pool are.
      std::vector<int32_t> pos(rows), pseq(rows);
      for (int64_t r = 0; r < rows; ++r) {
        pos[r] = prefill ? static_cast<int32_t>(r % keys)
                         : static_cast<int32_t>(std::min<int64_t>(cap - 1, keys * 3 / 4 + (r * 7919) % (keys / 2 + 1)));
        pseq[r] = static_cast<int32_t>(r / keys);
      }
      if (prefill && rows < keys) continue;
      must(cudaMemcpy(poss.as<void>(), pos.data(), rows * 4, cudaMemcpyHostToDevice), "pos");
      must(cudaMemcpy(prompt_seqs.as<void>(), pseq.data(), rows * 4, cudaMemcpyHostToDevice), "seqs");
      double us[kVariants];
      for (int k = 0; k < kVariants; ++k) {
        set_row_attention(variant_w[k]);
        auto call = [&] {
          if (prefill)
            must(attention(qkv.as<float>(), {Hq, Hkv, D}, scale, {prompt_seqs.as<int32_t>(), poss.as<int32_t>(), rows, true},
                           kv, out[k].as<float>(), nullptr, false),
                 "attention");
          else
            must(attention_decode(qkv.as<float>(), ld, {Hq, Hkv, D}, qn.as<float>(), kn.as<float>(), 1e-6f,
                                  inv.as<float>(), scale, {seqs.as<int32_t>(), poss.as<int32_t>(), rows, true}, kv,
                                  out[k].as<float>(), nullptr, false),
                 "attention");
        };
        for (int w = 0; w < 3; ++w) call();
        const int reps = 30;
        must(cudaEventRecord(e0), "record");
        for (int i = 0; i < reps; ++i) call();
        must(cudaEventRecord(e1), "record");
        must(cudaEventSynchronize(e1), "sync");
        float ms = 0;
        must(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
        us[k] = 1000.0 * ms / reps;
      }
      std::vector<float> a(rows * qw), b(rows * qw);
      must(cudaMemcpy(a.data(), out[0].as<void>(), a.size() * 4, cudaMemcpyDeviceToHost), "out");
      bool eq = true;
      for (int k = 1; k < kVariants; ++k) {
        must(cudaMemcpy(b.data(), out[k].as<void>(), b.size() * 4, cudaMemcpyDeviceToHost), "out");
        eq = eq && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
      }
      std::printf("%6lld %6lld %10.1f %10.1f %10.1f %10.1f %10.1f %s\n", static_cast<long long>(rows),
                  static_cast<long long>(keys), us[0], us[1], us[2], us[3], us[4], eq ? "yes" : "NO");
    }
  }
  }
  set_row_attention(kRowAttentionAuto);
  return 0;
}
