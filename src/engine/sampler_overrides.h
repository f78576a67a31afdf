// A request's sampler overrides (request.h) applied to a family's sampler settings; shared by the
// engines of every family.
#pragma once

#include "engine/request.h"
#include "sampling/sampler.h"

namespace chorus::engine {

inline void apply_overrides(const SamplerOverrides& o, sampling::SamplerParams& p) {
  if (o.greedy) p.greedy = *o.greedy;
  if (o.temperature) p.temperature = *o.temperature;
  if (o.top_k) p.top_k = *o.top_k;
  if (o.top_p) p.top_p = *o.top_p;
  if (o.repetition_penalty) p.repetition_penalty = *o.repetition_penalty;
}

}  // namespace chorus::engine
