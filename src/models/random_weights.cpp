#include "models/random_weights.h"

#include <cmath>

namespace chorus {

namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t hash_name(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Element i of a tensor comes from a counter-based stream, so ranges fill independently.
struct Stream {
  uint64_t key;
  double uniform(uint64_t i, uint64_t lane) const {
    uint64_t s = key ^ (i * 0xd1342543de82ef95ull + lane);
    return (static_cast<double>(splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  }
  double normal(uint64_t i) const {
    const double u1 = uniform(i, 1), u2 = uniform(i, 2);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

double sample(const WeightSpec& spec, const Stream& st, uint64_t i, double fan_in) {
  switch (spec.init) {
    case WeightInit::kLinear: return st.normal(i) / std::sqrt(fan_in);
    case WeightInit::kEmbedding: return st.normal(i);
    case WeightInit::kNormWeight: return 1.0 + 0.1 * st.normal(i);
    case WeightInit::kBias: return 0.05 * st.normal(i);
    case WeightInit::kScale: return 0.2 + 0.4 * st.uniform(i, 3);
    case WeightInit::kSnakeLog: return 0.3 * st.normal(i);
    case WeightInit::kUsage: return 0.5 + 1.5 * st.uniform(i, 3);
    case WeightInit::kOnes: return 1.0;
  }
  return 0.0;
}

}  // namespace

std::vector<io::TensorToWrite> random_weights(const WeightTable& table, uint64_t seed, DType dtype,
                                              ThreadPool* pool) {
  std::vector<io::TensorToWrite> out;
  out.reserve(table.specs().size());
  for (const auto& spec : table.specs()) {
    Tensor t = Tensor::zeros(dtype, spec.shape);
    const int64_t n = t.numel();
    double fan_in = 1.0;
    for (size_t d = 1; d < spec.shape.size(); ++d) fan_in *= static_cast<double>(spec.shape[d]);
    const Stream st{hash_name(spec.name, seed)};
    auto fill = [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float v = static_cast<float>(sample(spec, st, static_cast<uint64_t>(i), fan_in));
        if (dtype == DType::kBF16) t.mut<uint16_t>()[i] = f32_to_bf16(v);
        else t.f32()[i] = v;
      }
    };
    if (pool && n > (1 << 16)) pool->parallel_for(n, fill, 1 << 14);
    else fill(0, n);
    out.push_back({spec.name, std::move(t)});
  }
  return out;
}

}  // namespace chorus
