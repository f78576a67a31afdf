// The persistent decoder-stack kernel (runtime/cuda/decode_stack) against the per-kernel path of
// DeviceStack::forward on real-size layer shapes (the golden models are too small for it to
// apply), bit for bit, for bf16 stacks and for stacks quantised to int8 / fp8 at load. Both paths
// run the same decode steps on their own KV caches.
#include <gtest/gtest.h>

#include <cstdio>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "gpu_test_util.h"
#include "io/safetensors.h"
#include "nn/device_stack_cuda.h"
#include "nn/kv_pages.h"
#include "io/weight_table.h"
#include "runtime/cuda/decode_stack.h"

namespace chorus::gpu_test {
namespace {

namespace ng = nn::gpu;

struct HostTensor {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<uint16_t> bf16;
  std::vector<float> f32;
};

// A random Qwen3 stack (with QK-norm) written as a safetensors file under `dir`.
io::Checkpoint random_stack(const nn::Qwen3Dims& d, const std::string& dir, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<HostTensor> ts;
  const auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    std::normal_distribution<float> n(0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
    HostTensor t{name, DType::kBF16, {rows, cols}, {}, {}};
    t.bf16.resize(static_cast<size_t>(rows * cols));
    for (auto& v : t.bf16) v = f32_to_bf16(n(rng));
    ts.push_back(std::move(t));
  };
  const auto vec = [&](const std::string& name, int64_t n) {
    HostTensor t{name, DType::kF32, {n}, {}, random_vec(rng, static_cast<size_t>(n), 0.8f, 1.2f)};
    ts.push_back(std::move(t));
  };
  const int64_t qw = d.heads * d.head_dim, kvw = d.kv_heads * d.head_dim;
  for (int64_t i = 0; i < d.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    matrix(p + "self_attn.q_proj.weight", qw, d.hidden);
    matrix(p + "self_attn.k_proj.weight", kvw, d.hidden);
    matrix(p + "self_attn.v_proj.weight", kvw, d.hidden);
    matrix(p + "self_attn.o_proj.weight", d.hidden, qw);
    matrix(p + "mlp.gate_proj.weight", d.intermediate, d.hidden);
    matrix(p + "mlp.up_proj.weight", d.intermediate, d.hidden);
    matrix(p + "mlp.down_proj.weight", d.hidden, d.intermediate);
    vec(p + "input_layernorm.weight", d.hidden);
    vec(p + "post_attention_layernorm.weight", d.hidden);
    vec(p + "self_attn.q_norm.weight", d.head_dim);
    vec(p + "self_attn.k_norm.weight", d.head_dim);
  }
  vec("norm.weight", d.hidden);
  std::vector<io::TensorToWrite> out;
  for (const HostTensor& t : ts)
    out.push_back({t.name, Tensor::view(t.dtype, t.shape,
                                        t.dtype == DType::kBF16 ? static_cast<const void*>(t.bf16.data()) : t.f32.data())});
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/model.safetensors";
  EXPECT_TRUE(io::write_safetensors(path, out).ok());
  auto ckpt = io::Checkpoint::open_dir(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.error().to_string();
  return std::move(ckpt).value();
}

// max |a − b| / max |a| (0 when equal bit for bit; NaN-safe: a NaN anywhere gives infinity).
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) return 0.0;
  double worst = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(a[i])));
  }
  return scale > 0.0 ? worst / scale : INFINITY;
}

// `steps` decode rows at positions 0.. through both paths: every output, residual and cache within
// `tol` (relative to the largest magnitude; 0: bit for bit).
void check_stack(const nn::Qwen3Dims& d, int64_t capacity, int steps, bool bf16, uint32_t seed, double tol,
                 cpu::WeightFormat weights = cpu::WeightFormat::kBf16) {
  const std::string dir = ::testing::TempDir() + "/decode_stack_" + std::to_string(seed);
  const io::Checkpoint ckpt = random_stack(d, dir, seed);
  auto stack = ng::DeviceStack::load(Weights(ckpt), d, {}, {.weights = weights});
  ASSERT_TRUE(stack.ok()) << stack.error().to_string();
  ASSERT_EQ(stack->weights(), weights);
  auto ws = cuda::LinearWorkspace::create(1, stack->max_linear_k(), stack->max_linear_n_total());
  ASSERT_TRUE(ws.ok());
  const int64_t width = d.kv_heads * d.head_dim;
  const size_t kv_floats = static_cast<size_t>(ng::KvCacheRef::floats(d.layers, 1, capacity, width));
  cuda::DeviceBuffer kv[2] = {to_device(std::vector<float>(kv_floats, 0.0f)),
                              to_device(std::vector<float>(kv_floats, 0.0f))};
  std::vector<ng::StackScratch> scratch;
  for (int i = 0; i < 2; ++i) {
    auto sc = ng::StackScratch::create(d, 1);
    ASSERT_TRUE(sc.ok());
    scratch.push_back(std::move(sc).value());
  }
  cuda::DeviceBuffer seq = to_device(std::vector<int32_t>{0});
  cuda::DeviceBuffer pos = to_device(std::vector<int32_t>{0});
  const cuda::RowMap rows{seq.as<const int32_t>(), pos.as<const int32_t>(), 1, true};
  std::mt19937 rng(seed + 1);
  const uint64_t launches_before = cuda::decode_stack_launches();
  int differing_steps = 0;
  double worst = 0.0;
  for (int p = 0; p < steps; ++p) {
    const std::vector<float> x = random_vec(rng, static_cast<size_t>(d.hidden), -2.0f, 2.0f);
    ASSERT_EQ(cudaMemcpy(pos.data(), &p, sizeof p, cudaMemcpyHostToDevice), cudaSuccess);
    std::vector<float> h[2], out[2];
    for (int path = 0; path < 2; ++path) {
      cuda::DeviceBuffer hd = to_device(x), od = poisoned(static_cast<size_t>(d.hidden));
      cuda::decode_stack_set_enabled(path == 1);
      const ng::KvCacheRef ref{kv[path].as<float>(), 1, capacity, width};
      const Status st = stack->forward(hd.as<float>(), od.as<float>(), rows, ref, scratch[static_cast<size_t>(path)], *ws,
                                       nullptr, bf16);
      ASSERT_TRUE(st.ok()) << st.error().to_string();
      h[path] = to_host<float>(hd, x.size());
      out[path] = to_host<float>(od, x.size());
    }
    const double diff = std::max(rel_diff(h[0], h[1]), rel_diff(out[0], out[1]));
    worst = std::max(worst, diff);
    if (diff > tol && differing_steps++ == 0) ADD_FAILURE() << "step " << p << ": relative difference " << diff;
  }
  cuda::decode_stack_set_enabled(false);
  std::printf("[gpu stack] %s weights, %lld layers, capacity %lld, %d steps%s: outputs within %.3g of the per-kernel path\n",
              cpu::weight_format_name(weights), static_cast<long long>(d.layers), static_cast<long long>(capacity), steps,
              bf16 ? ", bf16" : "", worst);
  EXPECT_EQ(differing_steps, 0);
  // Non-vacuity: the persistent kernel really ran once per step.
  EXPECT_EQ(cuda::decode_stack_launches() - launches_before, static_cast<uint64_t>(steps));
  EXPECT_LE(rel_diff(to_host<float>(kv[0], kv_floats), to_host<float>(kv[1], kv_floats)), tol) << "KV caches differ";
  std::filesystem::remove_all(dir);
}

// The same decode steps with the cache in pages (nn/kv_pages.h; shuffled, with spare pages between)
// through the persistent kernel and the per-kernel path, against the persistent kernel over a
// contiguous cache: every output, residual and cached row bit for bit. The positions cross page
// boundaries, and the first 32 take the persistent kernel's preload path.
void check_paged_stack(const nn::Qwen3Dims& d, int64_t capacity, int steps, bool bf16, uint32_t seed) {
  constexpr int64_t P = nn::kKvPagePositions;
  const std::string dir = ::testing::TempDir() + "/decode_stack_paged_" + std::to_string(seed);
  const io::Checkpoint ckpt = random_stack(d, dir, seed);
  auto stack = ng::DeviceStack::load(Weights(ckpt), d);
  ASSERT_TRUE(stack.ok()) << stack.error().to_string();
  auto ws = cuda::LinearWorkspace::create(1, stack->max_linear_k(), stack->max_linear_n_total());
  ASSERT_TRUE(ws.ok());
  const int64_t width = d.kv_heads * d.head_dim, per_seq = capacity / P, pages = per_seq + 2;
  const int64_t page_floats = ng::KvCacheRef::page_floats(d.layers, width);
  const size_t kv_floats = static_cast<size_t>(ng::KvCacheRef::floats(d.layers, 1, capacity, width));
  cuda::DeviceBuffer contiguous = to_device(std::vector<float>(kv_floats, 0.0f));
  cuda::DeviceBuffer pool[2] = {to_device(std::vector<float>(static_cast<size_t>(pages * page_floats), 0.0f)),
                                to_device(std::vector<float>(static_cast<size_t>(pages * page_floats), 0.0f))};
  std::vector<int64_t> order(static_cast<size_t>(pages));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 shuffle_rng(seed + 2);
  std::shuffle(order.begin(), order.end(), shuffle_rng);
  cuda::DeviceBuffer table[2];
  for (int i = 0; i < 2; ++i) {
    std::vector<float*> t;
    for (int64_t j = 0; j < per_seq; ++j) t.push_back(pool[i].as<float>() + order[static_cast<size_t>(j)] * page_floats);
    table[i] = to_device(t);
  }
  std::vector<ng::StackScratch> scratch;
  for (int i = 0; i < 3; ++i) {
    auto sc = ng::StackScratch::create(d, 1);
    ASSERT_TRUE(sc.ok());
    scratch.push_back(std::move(sc).value());
  }
  cuda::DeviceBuffer seq = to_device(std::vector<int32_t>{0});
  cuda::DeviceBuffer pos = to_device(std::vector<int32_t>{0});
  const cuda::RowMap rows{seq.as<const int32_t>(), pos.as<const int32_t>(), 1, true};
  std::mt19937 rng(seed + 1);
  const uint64_t launches_before = cuda::decode_stack_launches();
  int differing_steps = 0;
  for (int p = 0; p < steps; ++p) {
    const std::vector<float> x = random_vec(rng, static_cast<size_t>(d.hidden), -2.0f, 2.0f);
    ASSERT_EQ(cudaMemcpy(pos.data(), &p, sizeof p, cudaMemcpyHostToDevice), cudaSuccess);
    std::vector<float> h[3], out[3];
    // 0: persistent, contiguous; 1: persistent, paged; 2: per kernel, paged.
    for (int run = 0; run < 3; ++run) {
      cuda::DeviceBuffer hd = to_device(x), od = poisoned(static_cast<size_t>(d.hidden));
      cuda::decode_stack_set_enabled(run < 2);
      ng::KvCacheRef ref{contiguous.as<float>(), 1, capacity, width};
      if (run > 0) ref = {nullptr, 1, capacity, width, table[run - 1].as<float* const>()};
      const Status st = stack->forward(hd.as<float>(), od.as<float>(), rows, ref, scratch[static_cast<size_t>(run)], *ws,
                                       nullptr, bf16);
      ASSERT_TRUE(st.ok()) << st.error().to_string();
      h[run] = to_host<float>(hd, x.size());
      out[run] = to_host<float>(od, x.size());
    }
    const bool same = h[1] == h[0] && out[1] == out[0] && h[2] == h[0] && out[2] == out[0];
    if (!same && differing_steps++ == 0) ADD_FAILURE() << "step " << p << ": the paged runs differ";
  }
  cuda::decode_stack_set_enabled(true);
  EXPECT_EQ(differing_steps, 0);
  EXPECT_EQ(cuda::decode_stack_launches() - launches_before, static_cast<uint64_t>(2 * steps));
  // Every cached row where the contiguous run has it.
  const std::vector<float> want = to_host<float>(contiguous, kv_floats);
  for (int i = 0; i < 2; ++i) {
    const std::vector<float> all = to_host<float>(pool[i], static_cast<size_t>(pages * page_floats));
    std::vector<float> got(kv_floats);
    for (int64_t l = 0; l < 2 * d.layers; ++l)  // keys and values of each layer
      for (int64_t t = 0; t < capacity; ++t) {
        const float* src = all.data() + order[static_cast<size_t>(t / P)] * page_floats + (l * P + t % P) * width;
        std::copy(src, src + width, got.begin() + (l * capacity + t) * width);
      }
    EXPECT_EQ(got, want) << (i == 0 ? "persistent" : "per-kernel") << " paged cache";
  }
  std::filesystem::remove_all(dir);
}

nn::Qwen3Dims code_predictor_dims(int64_t layers) {
  return nn::qwen3_dims(1024, 3072, layers, 16, 8, 128, 1e-6, 1e6, 32768);
}

TEST(GpuDecodeStack, SmallContextEqualsThePerKernelPath) {
  REQUIRE_GPU();
  check_stack(code_predictor_dims(3), 24, 17, false, 11, 0.0);
}

// Past 32 positions the attention reads the caches from global memory instead of a preload.
TEST(GpuDecodeStack, LongContextEqualsThePerKernelPath) {
  REQUIRE_GPU();
  check_stack(code_predictor_dims(2), 160, 90, false, 12, 0.0);
}

TEST(GpuDecodeStack, PagedCacheEqualsTheContiguousOne) {
  REQUIRE_GPU();
  check_paged_stack(code_predictor_dims(2), 3 * nn::kKvPagePositions, 150, false, 14);
  check_paged_stack(code_predictor_dims(2), 3 * nn::kKvPagePositions, 140, true, 15);
}

TEST(GpuDecodeStack, Bf16ActivationsEqualThePerKernelPath) {
  REQUIRE_GPU();
  check_stack(code_predictor_dims(2), 160, 60, true, 13, 0.0);
}

// Quantised stacks: the persistent kernel dequantises the bulk-copied codes as the quantised
// matrix-vector kernel does, in its order, so the two paths agree bit for bit too.
TEST(GpuDecodeStack, Int8StackEqualsThePerKernelPath) {
  REQUIRE_GPU();
  check_stack(code_predictor_dims(3), 24, 17, false, 14, 0.0, cpu::WeightFormat::kInt8);
}

TEST(GpuDecodeStack, Fp8StackEqualsThePerKernelPath) {
  REQUIRE_GPU();
  check_stack(code_predictor_dims(3), 24, 17, false, 15, 0.0, cpu::WeightFormat::kFp8);
}

TEST(GpuDecodeStack, Int8StackWithBf16ActivationsAndALongContextEqualsThePerKernelPath) {
  REQUIRE_GPU();
  check_stack(code_predictor_dims(2), 160, 60, true, 16, 0.0, cpu::WeightFormat::kInt8);
}

// The quantised stack holds about half the bytes of the bf16 one (8.5 bits per weight: a byte per
// code and an f16 scale per 32), and refuses int4.
TEST(GpuDecodeStack, QuantisedProjectionsHoldAboutHalfTheBytes) {
  REQUIRE_GPU();
  const nn::Qwen3Dims d = code_predictor_dims(2);
  const std::string dir = ::testing::TempDir() + "/decode_stack_bytes";
  const io::Checkpoint ckpt = random_stack(d, dir, 17);
  auto bf16 = ng::DeviceStack::load(Weights(ckpt), d);
  ASSERT_TRUE(bf16.ok());
  for (const auto f : {cpu::WeightFormat::kInt8, cpu::WeightFormat::kFp8}) {
    auto q = ng::DeviceStack::load(Weights(ckpt), d, {}, {.weights = f});
    ASSERT_TRUE(q.ok()) << q.error().to_string();
    const double ratio = static_cast<double>(q->projection_bytes()) / static_cast<double>(bf16->projection_bytes());
    EXPECT_NEAR(ratio, 8.5 / 16.0, 0.002) << cpu::weight_format_name(f);
    EXPECT_GT(q->max_dequant(), 0);
  }
  EXPECT_EQ(bf16->max_dequant(), 0);
  auto int4 = ng::DeviceStack::load(Weights(ckpt), d, {}, {.weights = cpu::WeightFormat::kInt4});
  ASSERT_FALSE(int4.ok());
  EXPECT_EQ(int4.error().code, ErrorCode::kUnsupported);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace chorus::gpu_test
