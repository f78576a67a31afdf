// Breeze TTS 2 generation (breeze_tts2.md §5): prompt → backbone prefill → per frame: backbone
// codebook 0 (guided, penalised, reserved ids masked, EOS class) → depth decoder codebooks 1..15
// (guided at every step) → the frame's row fed back to every branch.
//
// Classifier-free guidance runs one sequence per branch, each with its own backbone and depth cache,
// all fed the same chosen codes. Branches and their combination (upstream's order):
//   none:  cond                                  l = cond
//   cfg:   cond, uncond                          l = uncond + s · (cond − uncond)
//   dual:  uncond, ref, ins                      l = uncond + s_ref · (ref − uncond) + s_ins · (ins − uncond)
// The unconditional prompt drops the instruction (design → plain, direction → clone); plain and
// clone have no negative prompt (upstream refuses CFG there); dual guidance is for direction only
// (uncond plain, ref clone, ins design). Sampling: guidance → repetition penalty (codebook 0 only) → reserved mask →
// temperature → top-k → top-p, through the shared sampler, drawn at (seed, stream, frame, codebook).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "models/breeze_tts/backbone.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/breeze_tts/depth_decoder.h"
#include "models/breeze_tts/prompt.h"
#include "models/breeze_tts/text_encoder.h"
#include "sampling/sampler.h"

namespace chorus::breeze_tts {

enum class Guidance { kNone, kCfg, kDual };

struct GenerationParams {
  Layout layout = Layout::kPlain;
  Guidance guidance = Guidance::kNone;
  float cfg_scale = 1.0f;              // kCfg
  float ref_scale = 0.0f, ins_scale = 0.0f;  // kDual
  sampling::SamplerParams backbone;    // codebook 0 (repetition penalty applies here only)
  sampling::SamplerParams depth;       // codebooks 1..15 (its repetition penalty is ignored)
  int64_t max_frames = 0;              // 0: the config's max_new_tokens; also capped by max_seq_len
  int64_t min_frames = 0;              // EOS masked before this many frames
  uint64_t seed = 0;
  uint32_t rng_stream = 0;
  // kF32: the exactness mode (the goldens are an f32 run). kBF16: text encoder, prompt rows, backbone
  // and depth decoder store bf16 activations as upstream's bf16 run does (real checkpoints).
  Activations act = Activations::kF32;
};

// Wall time per stage, accumulated over steps. prefill: the prompt rows (text encoder) and the
// backbone's prefill pass; backbone: later backbone steps; sampling: codebook 0; depth: the depth
// walk with its sampling.
struct GenerationTimes {
  double prefill_s = 0, backbone_s = 0, depth_s = 0, sampling_s = 0;
};

// The checkpoint's defaults (upstream CLI/API: penalty 1.1, 1500 frames).
GenerationParams default_generation_params(const Config& c);

// The layouts of a request's branches, in the combination's order.
Result<std::vector<Layout>> branch_layouts(Layout layout, Guidance guidance);

// The three stages of a loaded checkpoint (immutable; share between streams).
struct BreezeModel {
  Config config;
  TextEncoder encoder;       // f32 activations
  TextEncoder encoder_bf16;  // bf16 activations (the same weights)
  Backbone backbone;
  DepthDecoder depth;
  Tensor audio_table;
  // `weights`: how the backbone's and depth decoder's layers are kept (bf16: as stored).
  static Result<BreezeModel> load(const ModelFiles& files, cpu::WeightFormat weights = cpu::WeightFormat::kBf16,
                                  ThreadPool* pool = nullptr);
};

// How a step of many generations shares its work.
struct StepOptions {
  // While any generation of the step is speaking, the prompts of those that have not started go in
  // at most this many rows per step (in order, over their branches), so that a long prompt never
  // stalls the ones already speaking by more than a short forward; with none speaking, whole prompts.
  int64_t prefill_rows = 32;
};

// What a step made for one generation: a frame of num_codebooks codes, or nothing (its prompt is
// still going in, or it ended at EOS or the frame limit).
struct StepFrame {
  bool has_frame = false;
  std::vector<int32_t> codes;
};

class BreezeGeneration;

// One frame step of every generation in `gens` (of one model; each at most once): the prompt pieces
// of newcomers in one backbone pass, every speaking generation's new rows in another, then the depth
// walks of all that sampled a codebook 0, together. A generation's codes are those of stepping it
// alone, whatever shares its steps and however its prompt was split.
Status step_generations(std::span<BreezeGeneration* const> gens, std::span<StepFrame> out, ThreadPool* pool,
                        GenerationTimes* times = nullptr, const StepOptions& options = {});

// One request's state: a backbone and depth cache per branch, the generated codebook-0 history.
class BreezeGeneration {
 public:
  static Result<BreezeGeneration> start(const BreezeModel& m, const PromptParts& parts, const GenerationParams& p);

  // Runs the prefill on the first call, then one frame. Returns false (and no frame) at EOS or the
  // frame limit; otherwise writes num_codebooks codes to `frame`.
  Result<bool> step(std::span<int32_t> frame, ThreadPool* pool, GenerationTimes* times = nullptr);

  bool finished() const { return finished_; }
  bool ended_by_eos() const { return eos_; }
  int64_t frames() const { return frames_; }
  int64_t max_frames() const { return max_frames_; }
  int64_t prompt_rows() const { return prompt_rows_; }
  // Prompt rows of every branch in the backbone's caches (the whole prompt once it is speaking).
  int64_t prefilled_rows() const;
  size_t state_bytes() const;
  const BreezeModel& model() const { return *m_; }
  Activations activations() const { return p_.act; }

 private:
  friend struct GenerationStepper;

  // l = the guided combination of [branches, n] logits.
  void combine(std::span<const float> branches, int64_t n, float* out) const;
  size_t branches() const { return caches_.size(); }
  // Start of branch b's pending rows in x_.
  int64_t pending_offset(size_t b) const;

  const BreezeModel* m_ = nullptr;
  GenerationParams p_;
  std::vector<nn::KvCache> caches_, depth_caches_;
  std::vector<int64_t> rows_;  // per branch: rows of the pending input
  std::vector<int64_t> fed_;   // per branch: of those, the rows already in its backbone cache
  std::vector<float> x_;       // pending input rows of every branch, concatenated
  // Per branch, from its last pending row: the final-normed hidden state (where the depth walk
  // starts) and the backbone logits; kept until every branch's input is in.
  std::vector<float> last_hidden_, last_logits_;
  std::vector<int32_t> history_;
  int64_t frames_ = 0, max_frames_ = 0, prompt_rows_ = 0;
  double prompt_s_ = 0;  // building the prompt rows in start(), reported with the first step's prefill
  bool finished_ = false, eos_ = false;
};

}  // namespace chorus::breeze_tts
