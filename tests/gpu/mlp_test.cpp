// cuda::fused_mlp (one decode row's MLP in one launch) against the CPU backend and against the
// two-launch path it replaces (cuda::linear gate/up with SwiGLU, then down with the residual add).
#include <algorithm>
#include <cmath>

#include "gpu_test_util.h"

namespace chorus::gpu_test {
namespace {

struct MlpCase {
  std::vector<float> h, norm;
  Bf16Matrix gate, up, down;  // down [hidden, inter]
  cuda::DeviceBuffer down_t, norm_dev;
  int64_t hidden = 0, inter = 0;
};

MlpCase make_case(std::mt19937& rng, int64_t hidden, int64_t inter) {
  MlpCase c;
  c.hidden = hidden;
  c.inter = inter;
  c.h = random_vec(rng, hidden, -2.0f, 2.0f);
  c.norm = random_vec(rng, hidden, 0.5f, 1.5f);
  c.gate = random_bf16(rng, inter, hidden, 1.0f / std::sqrt(static_cast<float>(hidden)));
  c.up = random_bf16(rng, inter, hidden, 1.0f / std::sqrt(static_cast<float>(hidden)));
  c.down = random_bf16(rng, hidden, inter, 1.0f / std::sqrt(static_cast<float>(inter)));
  c.norm_dev = to_device(c.norm);
  auto t = cuda::DeviceBuffer::alloc(c.down.host.size() * sizeof(uint16_t));
  EXPECT_TRUE(t.ok());
  c.down_t = std::move(t).value();
  EXPECT_TRUE(cuda::transpose_matrix(c.down.gpu(), c.down_t.as<uint16_t>(), nullptr).ok());
  return c;
}

std::vector<float> run_fused(const MlpCase& c, bool bf16, int rows = 1) {
  const int64_t hidden = c.hidden;
  auto h = to_device(c.h);
  auto partial = poisoned(cuda::fused_mlp_partial_floats(hidden, rows));
  cuda::FusedMlpArgs a;
  a.h = h.as<float>();
  a.rows = rows;
  a.norm_weight = c.norm_dev.as<float>();
  a.gate = c.gate.gpu();
  a.up = c.up.gpu();
  a.down_t = {c.down_t.as<const uint16_t>(), c.inter, hidden};
  a.partial = partial.as<float>();
  a.bf16 = bf16;
  const Status st = cuda::fused_mlp(a, nullptr);
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  return to_host<float>(h, static_cast<size_t>(rows * hidden));
}

std::vector<float> run_two_launches(const MlpCase& c, bool bf16) {
  const int64_t hidden = c.hidden;
  auto h = to_device(c.h);
  auto act = poisoned(static_cast<size_t>(c.inter));
  cuda::LinearArgs g;
  g.x = h.as<float>();
  g.ldx = hidden;
  g.M = 1;
  g.norm_weight = c.norm_dev.as<float>();
  g.out[0] = {c.gate.gpu(), nullptr, act.as<float>(), c.inter};
  g.out[1] = {c.up.gpu(), nullptr, act.as<float>(), c.inter};
  g.outputs = 2;
  g.epilogue = cuda::Epilogue::kSwiGlu;
  g.bf16 = bf16;
  EXPECT_TRUE(cuda::linear(g, nullptr, nullptr, cuda::kLinearGemv).ok());
  cuda::LinearArgs d;
  d.x = act.as<float>();
  d.ldx = c.inter;
  d.M = 1;
  d.out[0] = {c.down.gpu(), nullptr, h.as<float>(), hidden};
  d.epilogue = cuda::Epilogue::kAdd;
  d.bf16 = bf16;
  EXPECT_TRUE(cuda::linear(d, nullptr, nullptr, cuda::kLinearGemv).ok());
  return to_host<float>(h, hidden);
}

// The f32 CPU backend: rms_norm, the two projections, silu·up, down, residual add.
std::vector<float> run_cpu(const MlpCase& c) {
  const int64_t hidden = c.hidden;
  std::vector<float> n(hidden), g(static_cast<size_t>(c.inter)), u(g.size()), act(g.size()), y(hidden);
  cpu::rms_norm(c.h.data(), c.norm.data(), n.data(), 1, hidden, 1e-6f);
  cpu::linear(n.data(), 1, c.gate.cpu(), nullptr, g.data());
  cpu::linear(n.data(), 1, c.up.cpu(), nullptr, u.data());
  for (size_t i = 0; i < g.size(); ++i) act[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  cpu::linear(act.data(), 1, c.down.cpu(), nullptr, y.data());
  for (int64_t i = 0; i < hidden; ++i) y[static_cast<size_t>(i)] += c.h[static_cast<size_t>(i)];
  return y;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

struct Shape {
  int64_t hidden, inter;
};
// Breeze's depth decoder (1024 → 8192) and backbone (2048 → 6144), widths that leave warps without
// a feature (1000 < the grid's warps), and one whose features do not divide evenly among the warps.
// (At hidden 1024 one row takes the bulk-copy kernel; {1024, 100} leaves some of its blocks
// without a feature.)
constexpr Shape kShapes[] = {{1024, 8192}, {1024, 1000}, {1024, 3000}, {1024, 100}, {2048, 6144}, {2048, 1000}};

// Sets set_fused_mlp_bulk for one scope, back on (the default) after.
struct BulkSwitch {
  explicit BulkSwitch(bool on) { cuda::set_fused_mlp_bulk(on); }
  ~BulkSwitch() { cuda::set_fused_mlp_bulk(true); }
};

TEST(GpuFusedMlp, MatchesTheCpuAndTheTwoLaunchPath) {
  REQUIRE_GPU();
  std::mt19937 rng(41);
  for (const bool bulk : {true, false}) {
    const BulkSwitch sw(bulk);
    for (const Shape sh : kShapes) {
      SCOPED_TRACE(testing::Message() << "hidden " << sh.hidden << ", intermediate " << sh.inter
                                      << (bulk ? "" : ", register kernel only"));
      const MlpCase c = make_case(rng, sh.hidden, sh.inter);
      const auto fused = run_fused(c, false);
      const auto two = run_two_launches(c, false);
      const auto cpu = run_cpu(c);
      // Non-vacuity: the MLP moves h by a sizeable fraction of its range.
      EXPECT_GT(max_abs_diff(cpu, c.h), 0.1 * max_abs_diff(c.h, std::vector<float>(c.h.size(), 0.0f)));
      EXPECT_LT(rel_err(fused, cpu), 2e-5);
      // Only the down projection's summation order differs from the two launches.
      EXPECT_LT(rel_err(fused, two), 2e-6);
      EXPECT_EQ(fused, run_fused(c, false)) << "not deterministic";
    }
  }
}

// bf16-activation mode: the activations are bit-identical to the two-launch path, and the down sum
// (another f32 order) may move a value across a bf16 rounding boundary only in rare elements.
TEST(GpuFusedMlp, Bf16ModeAgreesWithTheTwoLaunchPath) {
  REQUIRE_GPU();
  std::mt19937 rng(43);
  for (const Shape sh : kShapes) {
    SCOPED_TRACE(testing::Message() << "hidden " << sh.hidden << ", intermediate " << sh.inter);
    const MlpCase c = make_case(rng, sh.hidden, sh.inter);
    const auto fused = run_fused(c, true);
    const auto two = run_two_launches(c, true);
    int differ = 0;
    for (int64_t i = 0; i < c.hidden; ++i) {
      const float a = fused[static_cast<size_t>(i)], b = two[static_cast<size_t>(i)];
      ASSERT_EQ(a, round_to_bf16(a)) << "not a bf16 value at " << i;
      if (a == b) continue;
      ++differ;
      EXPECT_LE(std::abs(a - b), std::ldexp(std::abs(b), -7)) << "more than one bf16 step at " << i;
    }
    EXPECT_LE(differ, 4);
    EXPECT_GT(max_abs_diff(fused, c.h), 0.1);
  }
}

// Two rows (guidance's branches) in one launch: each row bit-identical to its own one-row launch
// of the register kernel (the same features per warp, the same sums in the same order), which the
// tests above compare with the CPU and the two-launch path.
TEST(GpuFusedMlp, TwoRowsEqualTheirSingleRows) {
  REQUIRE_GPU();
  const BulkSwitch sw(false);
  std::mt19937 rng(47);
  for (const bool bf16 : {false, true}) {
    for (const int64_t inter : {8192, 1000}) {
      SCOPED_TRACE(testing::Message() << "intermediate " << inter << (bf16 ? ", bf16" : ", f32"));
      MlpCase c = make_case(rng, 1024, inter);
      const std::vector<float> h0 = c.h, h1 = random_vec(rng, 1024, -2.0f, 2.0f);
      const auto row0 = run_fused(c, bf16);
      c.h = h1;
      const auto row1 = run_fused(c, bf16);
      c.h = h0;
      c.h.insert(c.h.end(), h1.begin(), h1.end());
      const auto both = run_fused(c, bf16, 2);
      EXPECT_EQ(std::vector<float>(both.begin(), both.begin() + 1024), row0);
      EXPECT_EQ(std::vector<float>(both.begin() + 1024, both.end()), row1);
      EXPECT_GT(max_abs_diff(row1, h1), 0.1);
    }
  }
}

TEST(GpuFusedMlp, RefusesShapesItDoesNotRun) {
  REQUIRE_GPU();
  EXPECT_FALSE(cuda::fused_mlp_supported(1536, 4096));
  EXPECT_FALSE(cuda::fused_mlp_supported(1024, 0));
  EXPECT_TRUE(cuda::fused_mlp_supported(1024, 8192));
  EXPECT_TRUE(cuda::fused_mlp_supported(2048, 6144));
  EXPECT_TRUE(cuda::fused_mlp_supported(1024, 8192, 2));
  EXPECT_FALSE(cuda::fused_mlp_supported(1024, 8192, 3));
  EXPECT_FALSE(cuda::fused_mlp_supported(2048, 6144, 2));
  cuda::FusedMlpArgs a;
  a.gate = {nullptr, 64, 1536};
  EXPECT_FALSE(cuda::fused_mlp(a, nullptr).ok());
  a.gate = {nullptr, 64, 1024};  // shapes fine, buffers missing
  EXPECT_FALSE(cuda::fused_mlp(a, nullptr).ok());
}

}  // namespace
}  // namespace chorus::gpu_test
