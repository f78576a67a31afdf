// Teacher-forced passes of Qwen3-TTS, for measuring what a weight format costs
// (docs/quantization.md). The talker and the code predictor are fed fixed codes instead of their
// own choices, so two models of one checkpoint (e.g. bf16 and int4 weights) make every decision at
// the same inputs, and their logits and hidden states can be compared decision by decision.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "models/qwen3_tts/model.h"
#include "models/qwen3_tts/prompt.h"

namespace chorus::qwen3_tts {

struct ForcedPass {
  int64_t frames = 0;
  std::vector<float> c0_logits;  // [frames, codec_vocab]: the talker's logits for codebook 0 of frame f
  std::vector<float> cp_logits;  // [frames, groups − 1, vocab]: the code predictor's for codebook k + 1
  // The output of every decoder layer and of the final norm (nn::LayerTap), all calls' rows in call
  // order: talker_layers[l] holds layer l's rows. Empty unless asked for.
  std::vector<std::vector<float>> talker_layers, cp_layers;
};

// Prefills the prompt, then for each frame f < frames: the code predictor's walk from the talker's
// hidden state with codebooks 0..groups−2 of codes[f] as its inputs, and (but for the last frame)
// the talker step fed frame f. codes: [frames, groups].
Result<ForcedPass> teacher_forced_pass(const Model& m, const Prompt& prompt, std::span<const int32_t> codes,
                                       int64_t frames, bool tap_layers);

struct ForcedComparison {
  // Relative RMS error ‖h − h_ref‖ / ‖h_ref‖ of each layer's output over every row; the last entry
  // is the final norm's output.
  std::vector<double> talker_layer_error, cp_layer_error;
  double c0_logit_error = 0, cp_logit_error = 0;  // relative RMS error of the logits
  // KL(p_ref ‖ p) in nats of the codebook-0 distributions (softmax of the logits over the ids the
  // talker may emit), mean and largest over frames.
  double c0_kl_mean = 0, c0_kl_max = 0;
  double c0_top1 = 0;            // fraction of frames whose codebook-0 argmax (allowed ids) agrees
  std::vector<double> cp_top1;   // per codebook 1..groups−1: fraction of frames whose argmax agrees
  double cp_top1_mean = 0;
  // How peaked the reference's distributions are (mean probability of its top id): top-1
  // agreement means little where this is small (random-weight checkpoints: many near ties).
  double ref_c0_top_p = 0, ref_cp_top_p = 0;
};

// `ref` and `other` must be passes of the same frames of models of the same configuration.
Result<ForcedComparison> compare_forced(const Config& config, const ForcedPass& ref, const ForcedPass& other);

}  // namespace chorus::qwen3_tts
