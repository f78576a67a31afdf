// Weight-table entries of a Qwen3 decoder stack under a name prefix, in Hugging Face naming:
// <p>layers.<i>.{input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
// post_attention_layernorm, mlp.{gate,up,down}_proj}.weight and <p>norm.weight.
#pragma once

#include <string>

#include "io/weight_table.h"
#include "nn/qwen3_block.h"

namespace chorus::nn {

void declare_qwen3_layer(WeightTable& t, const std::string& prefix, const Qwen3Dims& d, bool qk_norm = true);
void declare_qwen3_stack(WeightTable& t, const std::string& prefix, const Qwen3Dims& d, bool qk_norm = true);

}  // namespace chorus::nn
