// The one sampler of the engine (every model and every codebook goes through it).
//
// A choice happens in two stages:
//   1. apply_rules: repetition penalty over earlier ids (l/p if l > 0 else l·p, each distinct id
//      once), then masking (−inf) of blocked ids and of ids outside the allowed range. This is the
//      Hugging Face logits-processor order; greedy decoding uses it too.
//   2. choose: greedy → the first id of largest logit. Otherwise, with s = l / temperature (f32):
//      top-k keeps ids with s >= the k-th largest s (ties kept); weights w = exp(f64(s) − f64(max s));
//      top-p keeps the fewest ids, taken by descending w (ascending id among equal w), whose weight
//      sum reaches top_p · Σw; finally u = uniform53(address), and the result is the first id, in
//      ascending id order, at which the running f64 sum of kept weights exceeds u · Σ(kept w)
//      (the last kept id if rounding leaves none). Every step is defined in f32/f64 so that another
//      backend can reproduce it exactly.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/error.h"
#include "sampling/rng.h"

namespace chorus::sampling {

struct SamplerParams {
  bool greedy = false;              // argmax; temperature, top-k and top-p are then unused
  float temperature = 1.0f;         // >= 0; 0 means greedy
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // (0, 1]; 1: off
  float repetition_penalty = 1.0f;  // > 0; 1: off
};

// Finite values in range; `who` prefixes the message ("talker sampler").
Status validate(const SamplerParams& p, const std::string& who);

struct LogitRules {
  std::span<const int32_t> penalized;     // earlier ids (repetition penalty)
  int64_t allowed_below = -1;             // >= 0: ids at or above it are masked ...
  std::span<const int32_t> also_allowed;  // ... except these
  std::span<const int32_t> blocked;       // masked regardless (e.g. EOS before the minimum length)
};

void apply_rules(std::span<float> logits, const LogitRules& rules, float repetition_penalty);

// Picks an id from processed logits (modified: used as scratch). Fails when no id is left or a
// logit is NaN / +inf (a broken model), never on valid input.
Result<int32_t> choose(std::span<float> logits, const SamplerParams& p, const DrawAddress& address);

// apply_rules then choose.
Result<int32_t> sample(std::span<float> logits, const LogitRules& rules, const SamplerParams& p,
                       const DrawAddress& address);

// Index of the largest logit (first on ties) and its gap to the second largest (+inf with one
// finite entry). For diagnostics and tests.
struct Top2 {
  int32_t id = -1;
  float margin = 0.0f;
};
Top2 top2(std::span<const float> logits);

}  // namespace chorus::sampling
