// Per-stream generation state of Qwen3-TTS and the batched step (spec §3.4).
//
// A stream is prefilled on its first step (the whole prompt in one batched forward), which also
// samples codebook 0 of frame 0. While other streams are speaking, a step prefills at most
// StepOptions::prefill_rows prompt rows of the newcomers (first come first), so a long prompt
// delays the speakers' frames by a bounded amount; a newcomer makes no frame until its prompt is
// in. The rows' values do not depend on how the prompt is split. Every step then produces one
// frame per active stream:
//   code predictor: codebooks 1..15 from (talker hidden z, c0), on the stream's fresh per-frame cache;
//   talker: input = frame embedding + trailing text row k (tts_pad once they run out), at position
//           prompt_rows + k; samples the next c0 with the repetition penalty over earlier c0s.
// A stream finishes when c0 is EOS (allowed once min_frames frames exist) or max_frames frames
// exist. Streams in one step share every matrix product but nothing else, so a stream's codes
// never depend on which other streams run with it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/error.h"
#include "models/qwen3_tts/model.h"
#include "models/qwen3_tts/prompt.h"
#include "nn/kv_cache.h"
#include "sampling/sampler.h"

namespace chorus::qwen3_tts {

struct GenerationSettings {
  sampling::SamplerParams talker;          // codebook 0 (repetition penalty applies here only)
  sampling::SamplerParams code_predictor;  // codebooks 1..15
  int64_t max_frames = 1;                  // >= 1
  int64_t min_frames = 2;                  // EOS is masked while fewer frames exist
  uint64_t seed = 0;
  uint32_t rng_stream = 0;
};

enum class FinishReason { kNotFinished, kEos, kMaxFrames };

class Stream {
 public:
  // Checks the settings; the prompt must come from build_prompt on the same model.
  static Result<std::unique_ptr<Stream>> create(std::shared_ptr<const Model> model, Prompt prompt,
                                                const GenerationSettings& settings);

  const Model& model() const { return *model_; }
  bool finished() const { return reason_ != FinishReason::kNotFinished; }
  FinishReason finish_reason() const { return reason_; }
  int64_t frames() const { return frames_; }
  int64_t prompt_rows() const { return prompt_rows_; }
  const GenerationSettings& settings() const { return settings_; }
  const nn::KvCache& talker_cache() const { return talker_cache_; }
  size_t state_bytes() const;  // caches and prompt rows held

  // Text that arrives while the stream runs (engine/qwen3_text_stream.h): trailing rows are added
  // as their tokens come, and the frame limit set once the whole text is known. The caller must
  // step the stream only while trailing_rows() > frames() or the text is complete, so the tts_pad
  // row is never used in place of a row still to come.
  int64_t trailing_rows() const { return prompt_.trailing_rows; }
  void append_trailing(const float* rows, int64_t n);
  // Lowers or raises the frame limit; it must stay above frames() and within the talker's context.
  Status set_max_frames(int64_t max_frames);

 private:
  friend struct StepRunner;
  Stream() = default;

  std::shared_ptr<const Model> model_;
  GenerationSettings settings_;
  Prompt prompt_;                  // prefill rows are released after the prefill
  int64_t prompt_rows_ = 0;
  int64_t prefilled_rows_ = 0;     // prompt rows in the talker cache
  bool prefilled() const { return prefilled_rows_ == prompt_rows_; }
  nn::KvCache talker_cache_, cp_cache_;
  std::vector<float> hidden_;      // z: talker hidden state that produced pending_c0_
  int32_t pending_c0_ = -1;
  std::vector<int32_t> c0_history_;
  int64_t frames_ = 0;
  FinishReason reason_ = FinishReason::kNotFinished;
};

struct FrameOutput {
  bool has_frame = false;
  std::vector<int32_t> codes;  // groups() codes when has_frame
};

// Wall time spent per stage, accumulated over calls (for benchmarks). The code predictor's time
// includes its sampling; talker_sampling_s is codebook 0's.
struct StepTimes {
  double talker_prefill_s = 0, talker_step_s = 0, code_predictor_s = 0, talker_sampling_s = 0;
};

struct StepOptions {
  // Prompt rows one step prefills while a stream of the batch is already speaking (>= 1); with
  // none speaking, the newcomers' whole prompts. On two cores 32 rows take ~0.2 s of a 0.6B talker.
  int64_t prefill_rows = 32;
};

// Advances every unfinished stream by one frame (prefilling those that need it). out[i] gets
// stream i's frame, if it produced one. All streams must belong to one model. A failure leaves
// the streams in an unspecified state: drop them.
Status step_streams(std::span<Stream* const> streams, std::span<FrameOutput> out, StepTimes* times = nullptr,
                    const StepOptions& options = {});

}  // namespace chorus::qwen3_tts
