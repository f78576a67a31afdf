// The family-agnostic engine interface: an immutable TtsModel creates per-request TtsStreams and
// advances any batch of its streams by one frame per step. CLI commands, the benchmark and (later)
// the server and GPU batching all go through it.
//
//   auto model = engine::load_tts_model(dir, {});
//   auto stream = (*model)->create_stream(request);
//   std::vector<engine::StepResult> out(1);
//   while (!(*stream)->finished()) (*model)->step({&stream_ptr, 1}, out);   // out[0].codes: one frame
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "engine/device.h"
#include "engine/request.h"
#include "models/codec/codec_config.h"
#include "nn/kv_pages.h"
#include "runtime/cpu/weight_format.h"

namespace chorus::engine {

enum class StopReason { kRunning, kEos, kMaxFrames, kCancelled };
const char* stop_reason_name(StopReason r);  // "running", "eos", "max-frames", "cancelled"

class TtsStream {
 public:
  virtual ~TtsStream() = default;
  virtual bool finished() const = 0;
  virtual StopReason stop_reason() const = 0;
  virtual int64_t frames() const = 0;        // frames produced so far
  virtual int64_t max_frames() const = 0;    // after the length cap
  virtual int64_t text_tokens() const = 0;   // of the target text
  virtual int64_t prompt_rows() const = 0;   // prefill length
  virtual size_t state_bytes() const = 0;    // caches and buffers held
  // Stops the stream before its next frame (finished() turns true, stop_reason() kCancelled); a
  // finished stream stays as it is. Not thread-safe: call it between steps.
  virtual void cancel() = 0;
  // Takes in any input that has arrived (text written while the request runs) and says whether
  // the stream can make its next frame now; false: it waits for input, leave it out of the step
  // (a stream passed to step() while waiting makes no frame). Finished streams are ready. Not
  // thread-safe: call it between steps.
  virtual Result<bool> ready() { return true; }
};

struct StepResult {
  bool has_frame = false;
  std::vector<int32_t> codes;  // codebooks() codes when has_frame
};

// Wall time per stage, accumulated over steps. "backbone" is the talker, "depth" the code predictor
// (sampling included); sampling_s is codebook 0's sampling.
struct StageTimes {
  double prefill_s = 0, backbone_s = 0, depth_s = 0, sampling_s = 0;
  // What a step did besides its frame (the GPU engines tell; the CPU engines leave 0): streams that
  // joined the running batch (their prompts prefilled), their prompt rows, and frame graphs captured;
  // the slots its frames computed (free ones below the last held slot included) and the slots that
  // moved down to fill holes; newcomers whose first frame was launched ahead of the next step.
  int64_t joined = 0, prefill_rows = 0, graphs_captured = 0, slots_computed = 0, slots_moved = 0, joined_ahead = 0;

  // The seconds of `o` (a request's share of a step); add() takes the counts as well.
  void add_seconds(const StageTimes& o) {
    prefill_s += o.prefill_s;
    backbone_s += o.backbone_s;
    depth_s += o.depth_s;
    sampling_s += o.sampling_s;
  }
  void add(const StageTimes& o) {
    add_seconds(o);
    joined += o.joined;
    prefill_rows += o.prefill_rows;
    graphs_captured += o.graphs_captured;
    slots_computed += o.slots_computed;
    slots_moved += o.slots_moved;
    joined_ahead += o.joined_ahead;
  }
};

struct ModelInfo {
  std::string family;   // "qwen3-tts"
  std::string variant;  // "custom_voice", ...
  int64_t codebooks = 0;
  double frame_rate = 0;     // frames per second of audio
  int64_t sample_rate = 0;
  std::vector<std::string> speakers;   // preset speaker names (CustomVoice), sorted
  std::vector<std::string> languages;  // accepted language names besides "auto", sorted
};

class VoiceCloner;
class TextFeed;

class TtsModel {
 public:
  virtual ~TtsModel() = default;
  virtual const ModelInfo& info() const = 0;
  // Whether a stream may join a batch whose streams have already made frames (true: any set of
  // this model's streams may be stepped together; false: the streams of a first step form a batch
  // that is stepped together until it ends, and newcomers form another).
  virtual bool joins_running_batch() const { return true; }
  // Voice cloning from audio, for checkpoints that can (nullptr otherwise).
  virtual const VoiceCloner* voice_cloner() const { return nullptr; }
  // Checks the request against the model (errors name the bad field); prefill happens on the first step.
  virtual Result<std::unique_ptr<TtsStream>> create_stream(const SynthesisRequest& request) const = 0;
  // A stream whose text arrives while it runs (the request has no text): *feed receives the text
  // (engine/text_feed.h). The codes equal those of the request with the whole text, however the
  // text is cut and timed. kUnsupported where the model cannot speak text before it is complete.
  virtual Result<std::unique_ptr<TtsStream>> create_text_stream(const SynthesisRequest& request,
                                                                std::shared_ptr<TextFeed>* feed) const;
  // Advances every unfinished stream by one frame; out[i] receives stream i's frame if it made one.
  // Streams must come from this model. On failure, drop the streams of this batch. A stream may
  // make no frame in a step while it waits for memory (the CUDA engines' KV pages).
  virtual Status step(std::span<TtsStream* const> streams, std::span<StepResult> out,
                      StageTimes* times = nullptr) const = 0;
  // The paged KV cache's pages (the CUDA engines: the backbone's caches), or nullopt where the
  // caches are not paged. Any thread, also while a step runs.
  virtual std::optional<nn::KvPageStats> kv_pages() const { return std::nullopt; }
};

// How a model keeps the decoder layers of generation (talker / code predictor, backbone / depth
// decoder): kBf16 as stored, the exact mode; quantised at load (weight-only, groups of 32 with f16
// scales; docs/quantization.md): kInt8 on both backends (the same numbers), kInt4 on the CPU only
// (runtime/cpu/quant.h), kFp8 (E4M3) on CUDA only (runtime/cpu/row_quant.h).
using WeightFormat = cpu::WeightFormat;

struct LoadOptions {
  Device device;               // where generation (and the codec) run
  ThreadPool* pool = nullptr;  // CPU threads (nullptr: ThreadPool::global()); must outlive the model
  // The decoder layers' weights (kUnsupported where the device has no kernels for them).
  WeightFormat weights = WeightFormat::kBf16;
  bool codec = true;           // engine::load: also load the codec (audio out); off for codes only
  // engine::load, CUDA: the codec's matrix products (codec_config.h); the CPU codec is f32 only.
  codec::CodecPrecision codec_precision = codec::CodecPrecision::kF32;
  // engine::load: a Hugging Face id missing from the local cache is downloaded into it (io/hf_hub.h;
  // HF_HUB_OFFLINE still forbids it). Off by default: loading never touches the network unasked.
  bool download = false;
  bool download_progress = false;  // a progress line per file on stderr
  // CUDA: the most device memory the backbone's paged KV cache may take (0: what the device allows,
  // nn/kv_page_pool_cuda.h). Streams that would need more wait for others to end.
  size_t kv_cache_bytes = 0;
  // CUDA: slots of the first frame pool (continuous batching). Streams past them open a pool twice
  // as large, and each pool steps apart, with launches of its own, until the older ones empty. A
  // server sets its stream limit, so one pool holds the whole load: on an H100, 256 slots against
  // 8 served 175 against 133 audio-s/s at 26 requests/s (docs/PERFORMANCE.md). A slot costs its
  // trailing text rows (positions × hidden floats: 4 MiB at 1024 positions of the 0.6B) in use or not.
  int first_pool_slots = 8;
  // CUDA: every linear layer of the frame pools on a row-invariant tensor-core kernel at every row
  // count, without the one-row kernels, so a stream's codes never depend on how many streams share
  // its steps (cuda::LinearWorkspace::every_row_tensor; the Breeze text encoder runs per request).
  // Off, steps of up to 8 rows per layer take the matrix-vector kernels and larger ones cuBLAS,
  // whose roundings differ, and a draw near a tie can then differ from the same stream's solo run.
  // The price, on an H100 with 0.6B static batches, the kernels against cuBLAS: a step of 8.7 /
  // 13.0 / 19.1 ms at 64 / 128 / 256 streams against 8.1 / 9.8 / 13.4 (docs/cuda.md). Quantised
  // weights keep the matrix-vector kernels for few rows either way.
  bool batch_invariant = false;
  // CUDA: each frame as two graphs (the depth walk, then the backbone step) instead of one, so the
  // model's stage times give their device times apart (`chorus bench --split-frames`); a little slower.
  bool split_frames = false;
};

// Detects the family of the checkpoint folder (a folder, or a Hugging Face id in the local cache)
// and loads its generator on options.device through the family registry (registry.h).
Result<std::unique_ptr<TtsModel>> load_tts_model(const std::string& spec, const LoadOptions& options = {});

}  // namespace chorus::engine
