// The sampler keys of a checkpoint's generation_config.json, shared by the families' writers.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace chorus::io {

// One stage's sampler: `do_sample_key` in full (checkpoints spell it differently), then
// temperature, top_k and top_p after `prefix`.
inline void put_sampler_keys(nlohmann::json& j, const std::string& do_sample_key, const std::string& prefix,
                             bool do_sample, double temperature, int64_t top_k, double top_p) {
  j[do_sample_key] = do_sample;
  j[prefix + "temperature"] = temperature;
  j[prefix + "top_k"] = top_k;
  j[prefix + "top_p"] = top_p;
}

}  // namespace chorus::io
