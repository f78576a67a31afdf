// Streams: seeded sampling is reproducible across runs and thread counts, a stream's codes do not
// depend on the other streams of its batch, and the stop rules (min frames, EOS, max frames) hold.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "core/dtype.h"
#include "golden_cases.h"
#include "io/safetensors.h"
#include "models/qwen3_tts/presets.h"
#include "models/qwen3_tts/stream.h"
#include "support/test_support.h"

namespace chorus::test {
namespace {

using qwen3_tts::FinishReason;
using qwen3_tts::GenerationSettings;
using qwen3_tts::Model;
using qwen3_tts::PromptInputs;
using qwen3_tts::Stream;

using Codes = std::vector<int32_t>;  // frames × 16, flattened

GenerationSettings sampling_settings(uint64_t seed, int64_t max_frames) {
  GenerationSettings g;
  g.talker.temperature = 0.9f;
  g.talker.top_k = 50;
  g.talker.repetition_penalty = 1.05f;
  g.code_predictor.temperature = 0.9f;
  g.code_predictor.top_k = 50;
  g.max_frames = max_frames;
  g.min_frames = max_frames;  // random weights: keep EOS out of the way here
  g.seed = seed;
  return g;
}

PromptInputs cv_inputs(const std::string& speaker, qwen3_tts::TextLayout layout) {
  PromptInputs in;
  in.text_ids = prompt_ids().text;
  in.speaker = speaker;
  in.language = "english";
  in.layout = layout;
  return in;
}

std::unique_ptr<Stream> make_stream(std::shared_ptr<const Model> m, const PromptInputs& in, const GenerationSettings& g) {
  auto p = qwen3_tts::build_prompt(*m, in);
  EXPECT_TRUE(p.ok()) << p.error().to_string();
  auto s = Stream::create(std::move(m), std::move(*p), g);
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  return std::move(*s);
}

// Steps the streams together until all finish; stream i joins at step join[i] (0: from the start).
// first_frame (optional): the step of each stream's first frame.
std::vector<Codes> run_batch(std::vector<Stream*> streams, std::vector<int> join = {},
                             const qwen3_tts::StepOptions& options = {}, std::vector<int>* first_frame = nullptr) {
  join.resize(streams.size(), 0);
  std::vector<Codes> codes(streams.size());
  if (first_frame) first_frame->assign(streams.size(), -1);
  for (int step = 0;; ++step) {
    std::vector<Stream*> batch;
    std::vector<size_t> idx;
    bool pending = false;
    for (size_t i = 0; i < streams.size(); ++i) {
      if (streams[i]->finished()) continue;
      if (join[i] > step) {
        pending = true;
        continue;
      }
      batch.push_back(streams[i]);
      idx.push_back(i);
    }
    if (batch.empty() && !pending) break;
    std::vector<qwen3_tts::FrameOutput> out(batch.size());
    const Status st = qwen3_tts::step_streams(batch, out, nullptr, options);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    if (!st.ok()) break;
    for (size_t b = 0; b < batch.size(); ++b) {
      if (!out[b].has_frame) continue;
      if (first_frame && (*first_frame)[idx[b]] < 0) (*first_frame)[idx[b]] = step;
      codes[idx[b]].insert(codes[idx[b]].end(), out[b].codes.begin(), out[b].codes.end());
    }
  }
  return codes;
}

Codes run_alone(std::shared_ptr<const Model> m, const PromptInputs& in, const GenerationSettings& g) {
  auto s = make_stream(std::move(m), in, g);
  return run_batch({s.get()})[0];
}

// A random CustomVoice checkpoint wide enough (hidden 128) that the kernels really split work
// across threads.
std::string small_model_dir() {
  static const std::string dir = [] {
    const std::string d = scratch_dir("generation_small_model");
    auto c = qwen3_tts::preset_config(qwen3_tts::Variant::kCustomVoice, qwen3_tts::Dims::kTiny);
    c.talker.dims.hidden = 128;
    c.talker.dims.intermediate = 256;
    c.talker.dims.head_dim = 32;
    c.code_predictor.dims.hidden = 96;
    c.code_predictor.dims.intermediate = 192;
    const Status st = qwen3_tts::write_random_model(d, c, 5);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    return d;
  }();
  return dir;
}

TEST(Streams, SeededSamplingIsTheSameAcrossRunsAndThreadCounts) {
  ThreadPool one(1), two(2), four(4);
  std::map<int, Codes> by_threads;
  Codes other_seed;
  for (ThreadPool* pool : {&one, &two, &four}) {
    auto m = Model::load(small_model_dir(), pool);
    ASSERT_TRUE(m.ok()) << m.error().to_string();
    const auto in = cv_inputs("vivian", qwen3_tts::TextLayout::kStreaming);
    const Codes a = run_alone(*m, in, sampling_settings(1234, 24));
    const Codes b = run_alone(*m, in, sampling_settings(1234, 24));
    EXPECT_EQ(a, b) << pool->size() << " threads: two runs differ";
    by_threads[pool->size()] = a;
    if (pool == &one) other_seed = run_alone(*m, in, sampling_settings(1235, 24));
  }
  ASSERT_EQ(by_threads[1].size(), 24u * 16);
  EXPECT_EQ(by_threads[1], by_threads[2]);
  EXPECT_EQ(by_threads[1], by_threads[4]);
  EXPECT_NE(by_threads[1], other_seed);  // the seed matters
}

TEST(Streams, CodesAreTheSameAloneAndInABatch) {
  auto cv = tiny_model("models/tiny_custom_voice");
  ASSERT_TRUE(cv);
  struct Spec {
    PromptInputs in;
    GenerationSettings g;
    int join;
  };
  std::vector<Spec> specs;
  specs.push_back({cv_inputs("ryan", qwen3_tts::TextLayout::kFull), sampling_settings(1, 20), 0});
  specs.push_back({cv_inputs("eric", qwen3_tts::TextLayout::kStreaming), sampling_settings(2, 12), 0});
  auto greedy = sampling_settings(3, 16);
  greedy.talker.greedy = greedy.code_predictor.greedy = true;
  specs.push_back({cv_inputs("vivian", qwen3_tts::TextLayout::kFull), greedy, 3});  // joins at step 3
  auto same_seed_other_stream = sampling_settings(1, 20);
  same_seed_other_stream.rng_stream = 1;
  specs.push_back({cv_inputs("ryan", qwen3_tts::TextLayout::kFull), same_seed_other_stream, 1});

  std::vector<Codes> alone;
  for (const auto& s : specs) alone.push_back(run_alone(cv, s.in, s.g));
  std::vector<std::unique_ptr<Stream>> owned;
  std::vector<Stream*> batch;
  std::vector<int> join;
  for (const auto& s : specs) {
    owned.push_back(make_stream(cv, s.in, s.g));
    batch.push_back(owned.back().get());
    join.push_back(s.join);
  }
  const std::vector<Codes> together = run_batch(batch, join);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(together[i].size(), size_t(specs[i].g.max_frames * 16)) << "stream " << i;
    EXPECT_EQ(together[i], alone[i]) << "stream " << i << " changed when batched";
    EXPECT_EQ(owned[i]->finish_reason(), FinishReason::kMaxFrames);
  }
  EXPECT_NE(alone[0], alone[3]);  // the request's rng stream separates takes with one seed
}

// A newcomer's prompt goes in a few rows per step while others speak (the speakers' frames wait for
// at most that many rows), and its codes are those of its solo run, where the prompt goes in whole:
// the rows' values do not depend on where the prompt is cut. Two newcomers joining at one step
// share the step's rows first come first.
TEST(Streams, PromptsPrefilledInPiecesWhileOthersSpeakGiveTheSoloCodes) {
  auto cv = tiny_model("models/tiny_custom_voice");
  ASSERT_TRUE(cv);
  auto greedy = sampling_settings(7, 14);
  greedy.talker.greedy = greedy.code_predictor.greedy = true;
  const std::vector<std::pair<PromptInputs, GenerationSettings>> specs = {
      {cv_inputs("ryan", qwen3_tts::TextLayout::kStreaming), sampling_settings(11, 30)},  // speaks from step 0
      {cv_inputs("eric", qwen3_tts::TextLayout::kFull), sampling_settings(12, 16)},       // joins at step 2
      {cv_inputs("vivian", qwen3_tts::TextLayout::kFull), greedy},                        // joins at step 2 too
      {cv_inputs("ryan", qwen3_tts::TextLayout::kStreaming), sampling_settings(13, 10)},  // joins at step 5
  };
  const std::vector<int> join = {0, 2, 2, 5};
  std::vector<Codes> alone;
  for (const auto& [in, g] : specs) alone.push_back(run_alone(cv, in, g));
  std::vector<std::unique_ptr<Stream>> owned;
  std::vector<Stream*> batch;
  for (const auto& [in, g] : specs) {
    owned.push_back(make_stream(cv, in, g));
    batch.push_back(owned.back().get());
  }
  const int64_t rows = owned[1]->prompt_rows();
  ASSERT_GT(rows, 6) << "the prompt must be long enough to be cut";
  std::vector<int> first;
  const std::vector<Codes> together = run_batch(batch, join, {.prefill_rows = 3}, &first);
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(together[i].size(), size_t(specs[i].second.max_frames * 16)) << "stream " << i;
    EXPECT_EQ(together[i], alone[i]) << "stream " << i << " changed when its prompt went in pieces";
  }
  // Non-vacuity: the first stream had the whole prompt at once; the joiners waited for their pieces,
  // the second joiner of step 2 behind the first.
  EXPECT_EQ(first[0], 0);
  EXPECT_EQ(first[1], join[1] + static_cast<int>((rows + 2) / 3) - 1);
  EXPECT_GT(first[2], first[1]);
  EXPECT_GT(first[3], join[3]);
}

TEST(Streams, AStepRefusesPrefillingNoRows) {
  auto cv = tiny_model("models/tiny_custom_voice");
  ASSERT_TRUE(cv);
  auto a = make_stream(cv, cv_inputs("ryan", qwen3_tts::TextLayout::kFull), sampling_settings(1, 4));
  Stream* one[1] = {a.get()};
  std::vector<qwen3_tts::FrameOutput> out(1);
  EXPECT_FALSE(qwen3_tts::step_streams(one, out, nullptr, {.prefill_rows = 0}).ok());
}

// The tiny CustomVoice model with its codec head rewritten so that EOS is likely but not certain:
// row EOS = 20·w and rows 0..2047 = −20·w for one random row w, so the EOS logit beats every code by
// a wide margin exactly when w·z > 0, which varies from frame to frame.
std::string eos_prone_model_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    const std::string src = reference_path("qwen3_tts/models/tiny_custom_voice");
    const std::string d = scratch_dir("generation_eos_prone_model");
    fs::copy(src, d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    auto f = io::SafetensorsFile::open(src + "/model.safetensors");
    EXPECT_TRUE(f.ok());
    std::vector<io::TensorToWrite> out;
    for (const auto& info : f->tensors()) {
      Tensor t = f->tensor(info);
      if (info.name == "talker.codec_head.weight") {
        const int64_t rows = t.dim(0), H = t.dim(1);
        Tensor m = Tensor::zeros(t.dtype(), t.shape());
        const auto* w = t.as<uint16_t>() + 100 * H;  // any row
        auto* dst = m.mut<uint16_t>();
        for (int64_t r = 0; r < rows; ++r) {
          const float sign = r == 2150 ? 20.0f : r < 2048 ? -20.0f : 0.0f;
          for (int64_t i = 0; i < H; ++i) dst[r * H + i] = f32_to_bf16(sign * bf16_to_f32(w[i]));
        }
        t = m;
      }
      out.push_back({info.name, t});
    }
    EXPECT_TRUE(io::write_safetensors(d + "/model.safetensors", out, {{"format", "pt"}}).ok());
    return d;
  }();
  return dir;
}

TEST(Streams, MinFramesHoldsAndEosEndsAStreamWithoutAppearingInItsCodes) {
  auto m = Model::load(eos_prone_model_dir(), nullptr);
  ASSERT_TRUE(m.ok()) << m.error().to_string();
  const int32_t eos = static_cast<int32_t>((*m)->config().talker.codec_eos_id);
  std::vector<std::unique_ptr<Stream>> owned;
  std::vector<Stream*> batch;
  const int64_t min_frames[] = {0, 1, 2, 5, 9};
  for (uint64_t seed = 0; seed < 40; ++seed) {
    GenerationSettings g = sampling_settings(seed, 40);
    g.min_frames = min_frames[seed % 5];
    owned.push_back(make_stream(*m, cv_inputs("ryan", qwen3_tts::TextLayout::kStreaming), g));
    batch.push_back(owned.back().get());
  }
  const std::vector<Codes> codes = run_batch(batch);
  int eos_stops = 0, max_stops = 0, zero_frames = 0;
  for (size_t i = 0; i < owned.size(); ++i) {
    const Stream& s = *owned[i];
    ASSERT_TRUE(s.finished());
    const int64_t frames = static_cast<int64_t>(codes[i].size() / 16);
    EXPECT_EQ(frames, s.frames());
    EXPECT_GE(frames, s.settings().min_frames) << "stream " << i << " stopped before its minimum";
    if (s.finish_reason() == FinishReason::kEos) {
      ++eos_stops;
      zero_frames += frames == 0;
      EXPECT_LT(frames, 40);
    } else {
      ++max_stops;
      EXPECT_EQ(frames, 40);
    }
    for (size_t f = 0; f < codes[i].size(); f += 16) {
      EXPECT_NE(codes[i][f], eos);
      EXPECT_LT(codes[i][f], 2048) << "codebook 0 outside the codebook";
    }
  }
  // EOS stops happen, including at the very first sample (an empty stream, allowed with min 0).
  EXPECT_GE(eos_stops, 10);
  EXPECT_GE(zero_frames, 1);
  std::printf("[stop] %d streams stopped by EOS (%d with no frame), %d by max frames\n", eos_stops, zero_frames, max_stops);
}

TEST(Streams, RejectsBadSettingsAndMixedModels) {
  auto cv = tiny_model("models/tiny_custom_voice");
  auto vd = tiny_model("models/tiny_voice_design");
  ASSERT_TRUE(cv && vd);
  auto p = qwen3_tts::build_prompt(*cv, cv_inputs("ryan", qwen3_tts::TextLayout::kFull));
  ASSERT_TRUE(p.ok());
  auto g = sampling_settings(1, 4);
  g.max_frames = 0;
  EXPECT_FALSE(Stream::create(cv, *p, g).ok());
  g = sampling_settings(1, 4);
  g.talker.top_p = 0.0f;
  EXPECT_FALSE(Stream::create(cv, *p, g).ok());
  g = sampling_settings(1, 40000);  // past the talker's 32768 positions
  EXPECT_FALSE(Stream::create(cv, *p, g).ok());
  auto wide = Model::load(small_model_dir(), nullptr);
  ASSERT_TRUE(wide.ok());
  EXPECT_FALSE(Stream::create(*wide, *p, sampling_settings(1, 4)).ok());  // a prompt of another width

  PromptInputs vin;
  vin.text_ids = prompt_ids().text;
  auto a = make_stream(cv, cv_inputs("ryan", qwen3_tts::TextLayout::kFull), sampling_settings(1, 4));
  auto b = make_stream(vd, vin, sampling_settings(1, 4));
  Stream* both[2] = {a.get(), b.get()};
  std::vector<qwen3_tts::FrameOutput> out(2);
  EXPECT_FALSE(qwen3_tts::step_streams(both, out).ok());
  Stream* twice[2] = {a.get(), a.get()};
  EXPECT_FALSE(qwen3_tts::step_streams(twice, out).ok());
}

}  // namespace
}  // namespace chorus::test
