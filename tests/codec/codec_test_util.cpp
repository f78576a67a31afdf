#include "codec_test_util.h"

#include <cstring>
#include <random>

#include "models/codec/weights.h"
#include "models/random_weights.h"
#include "support/test_support.h"

namespace chorus::codec::test {

io::SafetensorsFile open_golden(const std::string& rel) {
  auto f = io::SafetensorsFile::open(chorus::test::reference_path(rel));
  if (!f.ok()) {
    ADD_FAILURE() << f.error().to_string();
    return io::SafetensorsFile{};
  }
  return std::move(f).value();
}

std::vector<float> golden_f32(const io::SafetensorsFile& f, const std::string& name, Shape* shape) {
  const io::TensorInfo* info = f.find(name);
  if (!info || info->dtype != DType::kF32) {
    ADD_FAILURE() << "golden tensor " << name << " missing or not F32 in " << f.path();
    return {};
  }
  const Tensor t = f.tensor(*info);
  if (shape) *shape = t.shape();
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

std::vector<int32_t> golden_i32(const io::SafetensorsFile& f, const std::string& name, Shape* shape) {
  const io::TensorInfo* info = f.find(name);
  if (!info || info->dtype != DType::kI32) {
    ADD_FAILURE() << "golden tensor " << name << " missing or not I32 in " << f.path();
    return {};
  }
  const Tensor t = f.tensor(*info);
  if (shape) *shape = t.shape();
  return std::vector<int32_t>(t.as<int32_t>(), t.as<int32_t>() + t.numel());
}

std::string tiny_codec_dir() {
  return chorus::test::reference_path("qwen3_tts/models/tiny_custom_voice/speech_tokenizer");
}

RandomCodec make_random_codec(const CodecConfig& config, uint64_t seed, const std::string& name) {
  RandomCodec rc;
  rc.dir = chorus::test::scratch_dir("codec_" + name);
  rc.config = config;
  auto tensors = random_weights(codec_weight_table(config, false), seed, DType::kF32);
  // Like the reference tiny models: damp the residual branches and scale the last conv so the
  // audio is not mostly clipped (which would make comparisons of it weak).
  const std::string last = "decoder.decoder." + std::to_string(config.decoder.upsample_rates.size() + 2) + ".conv.weight";
  for (auto& t : tensors) {
    float factor = 1.0f;
    if (t.name == last) factor = 0.15f;
    if (t.name.find(".conv2.conv.weight") != std::string::npos) factor = 0.3f;
    if (factor != 1.0f)
      for (int64_t i = 0; i < t.tensor.numel(); ++i) t.tensor.f32()[i] *= factor;
  }
  const std::string file = rc.dir + "/model.safetensors";
  auto st = io::write_safetensors(file, tensors);
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  auto ckpt = io::Checkpoint::open_dir(rc.dir, "model");
  EXPECT_TRUE(ckpt.ok()) << ckpt.error().to_string();
  if (ckpt.ok()) rc.ckpt = std::move(ckpt).value();
  return rc;
}

CodecConfig small_eight_layer_config() {
  CodecConfig c;
  auto& d = c.decoder;
  d.codebook_size = 64;
  d.codebook_dim = 8;
  d.latent_dim = 16;
  d.transformer.hidden = 16;
  d.transformer.intermediate = 32;
  d.transformer.layers = 8;  // real depth: windows stack to 8 × 71 frames
  d.transformer.heads = 4;
  d.transformer.kv_heads = 2;  // grouped-query attention, unlike the real decoder, to cover it
  d.transformer.head_dim = 8;
  d.transformer.rms_eps = 1e-5;
  d.transformer.rope_theta = 10000;
  d.sliding_window = 72;
  d.decoder_dim = 16;
  d.upsampling_ratios = {2, 2};
  d.upsample_rates = {8, 5, 4, 3};
  c.samples_per_frame = 1920;
  return c;
}

std::vector<int32_t> random_codes(int64_t frames, int64_t num_quantizers, int64_t codebook_size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(codebook_size - 1));
  std::vector<int32_t> codes(static_cast<size_t>(frames * num_quantizers));
  for (auto& c : codes) c = d(rng);
  return codes;
}

StageTap StageCollector::tap() {
  return [this](const std::string& name, const float* data, int64_t channels, int64_t steps) {
    Stage& s = stages[name];
    if (s.rows.empty()) {
      s.channels = channels;
      s.rows.resize(static_cast<size_t>(channels));
    }
    ASSERT_EQ(s.channels, channels) << name;
    for (int64_t c = 0; c < channels; ++c)
      s.rows[c].insert(s.rows[c].end(), data + c * steps, data + (c + 1) * steps);
  };
}

std::vector<float> StageCollector::get(const std::string& name, int64_t* channels, int64_t* steps) const {
  auto it = stages.find(name);
  if (it == stages.end()) {
    ADD_FAILURE() << "stage " << name << " was not tapped";
    return {};
  }
  std::vector<float> out;
  for (const auto& r : it->second.rows) out.insert(out.end(), r.begin(), r.end());
  if (channels) *channels = it->second.channels;
  if (steps) *steps = it->second.rows.empty() ? 0 : static_cast<int64_t>(it->second.rows[0].size());
  return out;
}

Diff compare(const std::vector<float>& got, const std::vector<float>& want) {
  Diff d;
  EXPECT_EQ(got.size(), want.size());
  double ss = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(e <= d.max_abs)) {  // also catches NaN
      d.max_abs = std::isnan(e) ? INFINITY : e;
      d.argmax = static_cast<int64_t>(i);
    }
    d.max_ref = std::max(d.max_ref, std::fabs(static_cast<double>(want[i])));
    ss += static_cast<double>(want[i]) * want[i];
  }
  d.rms_ref = want.empty() ? 0 : std::sqrt(ss / want.size());
  return d;
}

::testing::AssertionResult bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << b.size();
  if (a.empty()) return ::testing::AssertionFailure() << "nothing to compare";
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure() << "first difference at sample " << i << " (frame " << i / 1920
                                           << "): " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

}  // namespace chorus::codec::test
