#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace chorus::sampling {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool contains(std::span<const int32_t> ids, int64_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}
}  // namespace

Status validate(const SamplerParams& p, const std::string& who) {
  auto bad = [&](const std::string& what) { return make_error(ErrorCode::kInvalidArgument, who + ": " + what); };
  if (!std::isfinite(p.temperature) || p.temperature < 0.0f || p.temperature > 100.0f)
    return bad("temperature must be in [0, 100] (0 = greedy)");
  if (p.top_k < 0) return bad("top-k must be >= 0 (0 = off)");
  if (!std::isfinite(p.top_p) || p.top_p <= 0.0f || p.top_p > 1.0f) return bad("top-p must be in (0, 1]");
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0.0f || p.repetition_penalty > 100.0f)
    return bad("repetition penalty must be in (0, 100]");
  return ok_status();
}

void apply_rules(std::span<float> logits, const LogitRules& r, float penalty) {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (penalty != 1.0f) {
    // Each distinct id once, as Hugging Face's gather/scatter does.
    std::vector<int32_t> ids(r.penalized.begin(), r.penalized.end());
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (int32_t id : ids) {
      if (id < 0 || id >= n) continue;
      float& l = logits[id];
      l = l > 0.0f ? l / penalty : l * penalty;
    }
  }
  for (int32_t id : r.blocked)
    if (id >= 0 && id < n) logits[id] = kNegInf;
  if (r.allowed_below >= 0)
    for (int64_t id = r.allowed_below; id < n; ++id)
      if (!contains(r.also_allowed, id)) logits[id] = kNegInf;
}

Top2 top2(std::span<const float> logits) {
  Top2 t;
  float best = kNegInf, second = kNegInf;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float l = logits[i];
    if (t.id < 0 || l > best) {
      second = best;
      best = l;
      t.id = static_cast<int32_t>(i);
    } else if (l > second) {
      second = l;
    }
  }
  t.margin = second == kNegInf ? std::numeric_limits<float>::infinity() : best - second;
  return t;
}

Result<int32_t> choose(std::span<float> l, const SamplerParams& p, const DrawAddress& address) {
  const int64_t n = static_cast<int64_t>(l.size());
  int64_t finite = 0;
  for (float v : l) {
    if (std::isnan(v) || v == std::numeric_limits<float>::infinity())
      return make_error(ErrorCode::kInternal, "sampler: the model produced a non-finite logit");
    finite += v != kNegInf;
  }
  if (finite == 0) return make_error(ErrorCode::kInternal, "sampler: every id is masked");
  if (p.greedy || p.temperature == 0.0f) return top2(l).id;

  for (float& v : l) v = v / p.temperature;  // −inf stays −inf
  if (p.top_k > 0 && p.top_k < finite) {
    std::vector<float> vals;
    vals.reserve(static_cast<size_t>(finite));
    for (float v : l)
      if (v != kNegInf) vals.push_back(v);
    std::nth_element(vals.begin(), vals.begin() + (p.top_k - 1), vals.end(), std::greater<float>());
    const float kth = vals[static_cast<size_t>(p.top_k - 1)];
    for (float& v : l)
      if (v < kth) v = kNegInf;
  }
  float max_s = kNegInf;
  for (float v : l) max_s = std::max(max_s, v);
  std::vector<double> w(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    if (l[i] != kNegInf) w[i] = std::exp(static_cast<double>(l[i]) - static_cast<double>(max_s));

  if (p.top_p < 1.0f) {
    std::vector<int32_t> order;
    for (int64_t i = 0; i < n; ++i)
      if (w[i] > 0.0) order.push_back(static_cast<int32_t>(i));
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return w[a] != w[b] ? w[a] > w[b] : a < b; });
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) total += w[i];
    const double need = static_cast<double>(p.top_p) * total;
    double cum = 0.0;
    size_t keep = 0;
    while (keep < order.size() && (keep == 0 || cum < need)) cum += w[order[keep++]];
    for (size_t j = keep; j < order.size(); ++j) w[order[j]] = 0.0;
  }

  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += w[i];
  const double target = uniform53(address) * total;
  double cum = 0.0;
  int32_t last = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (w[i] <= 0.0) continue;
    cum += w[i];
    last = static_cast<int32_t>(i);
    if (cum > target) return last;
  }
  return last;
}

Result<int32_t> sample(std::span<float> logits, const LogitRules& rules, const SamplerParams& p,
                       const DrawAddress& address) {
  apply_rules(logits, rules, p.repetition_penalty);
  return choose(logits, p, address);
}

}  // namespace chorus::sampling
