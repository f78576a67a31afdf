// CudaDecoder::decode_batch (models/codec/decoder_cuda.h): many streams decoded together, each one
// started at a different call (different histories, positions, ring wraps, some past the attention
// window), with different block sizes and ragged frame counts per call (1–3 frames, sometimes 0),
// must give every stream bit for bit what decode() gives it alone with the same calls, and what one
// decode() of its whole sequence gives; and within tolerance what the CPU decoder (the reference)
// gives. Changing one stream's codes changes that stream's samples only; a bad code or a bad state
// fails the whole call before any state moves; more streams than one step holds take several steps.
// Finally the Synthesizer on the GPU (one batched codec pass per step) delivers for each request
// the samples an offline decode of its codes gives.
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "engine/model.h"
#include "engine/synthesizer.h"
#include "generation/golden_cases.h"
#include "gpu_codec_util.h"
#include "gpu_test_util.h"
#include "models/codec/decoder.h"
#include "models/codec/decoder_cuda.h"

namespace chorus::gpu_test {
namespace {

using codec::CudaDecoder;
using codec::CudaDecoderState;

struct Loaded {
  Codec codec;
  std::unique_ptr<CudaDecoder> gpu;
};

// The codecs, made and uploaded once: "real" (real-size dims, random weights), "real_bf16" (the
// same with bf16 products: its many-column convolutions take bf16 columns and weights), "gqa" (8
// layers, grouped-query attention), "tiny" (the tiny reference codec).
const Loaded& codec_of(const std::string& kind) {
  static std::map<std::string, std::unique_ptr<Loaded>> cache;
  auto& slot = cache[kind];
  if (slot) return *slot;
  slot = std::make_unique<Loaded>();
  if (kind == "real" || kind == "real_bf16") {
    slot->codec = random_codec(real_config(), 5, "batch_" + kind);
  } else if (kind == "gqa") {
    slot->codec = random_codec(small_gqa_config(), 3, "batch_gqa");
  } else {
    const std::string dir = test::reference_path("qwen3_tts/models/tiny_custom_voice/speech_tokenizer");
    auto cfg = codec::load_codec_config(dir + "/config.json");
    EXPECT_TRUE(cfg.ok());
    auto ck = io::Checkpoint::open_dir(dir, "model");
    EXPECT_TRUE(ck.ok());
    if (cfg.ok() && ck.ok()) slot->codec = Codec{*cfg, std::move(ck).value()};
  }
  auto d = CudaDecoder::load(slot->codec.ckpt, slot->codec.config,
                             kind == "real_bf16" ? codec::CodecPrecision::kBf16 : codec::CodecPrecision::kF32);
  EXPECT_TRUE(d.ok()) << d.error().to_string();
  if (d.ok()) slot->gpu = std::make_unique<CudaDecoder>(std::move(d).value());
  return *slot;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Stream i: `total` frames of its own random codes, joining at call `start`, internal block `block`.
struct StreamPlan {
  int64_t total = 0, start = 0, block = 8;
  std::vector<int32_t> codes;
  std::vector<int64_t> calls;  // frames it got in each call since it joined, filled by run_batched
};

std::vector<StreamPlan> stream_plans(const CodecConfig& c, int streams, uint32_t seed) {
  static constexpr int64_t kBlocks[4] = {8, 4, 1, 16};
  std::vector<StreamPlan> p(static_cast<size_t>(streams));
  for (int i = 0; i < streams; ++i) {
    StreamPlan& s = p[static_cast<size_t>(i)];
    // 10..109 frames: stream 0 (105) and others past the window (72) and their rings (72..87 rows).
    s.total = 10 + (i * 37 + 95) % 100;
    s.start = (i * 11) % 40;
    s.block = kBlocks[i % 4];
    s.codes = random_codes(s.total, c, seed + static_cast<uint32_t>(i));
  }
  return p;
}

// Decodes all plans with one decode_batch() per call; frames per call 1–3, sometimes 0 (a stream
// waiting for input), or always 1 with `one_each`; all streams that have joined and not finished
// in every call.
std::vector<std::vector<float>> run_batched(const CudaDecoder& dec, std::vector<StreamPlan>& plans,
                                            int64_t* calls_made = nullptr, bool one_each = false) {
  const int64_t Q = dec.num_quantizers();
  std::vector<CudaDecoderState> states;
  for (const StreamPlan& p : plans) {
    auto st = dec.new_state(p.block);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    if (!st.ok()) return {};
    states.push_back(std::move(*st));
  }
  std::vector<std::vector<float>> got(plans.size());
  std::vector<int64_t> done(plans.size(), 0);
  int64_t call = 0;
  for (;; ++call) {
    std::vector<CudaDecoderState*> s;
    std::vector<const int32_t*> codes;
    std::vector<int64_t> frames;
    std::vector<std::vector<float>*> outs;
    bool left = false;
    for (size_t i = 0; i < plans.size(); ++i) {
      StreamPlan& p = plans[i];
      if (call < p.start || done[i] == p.total) continue;
      left = true;
      const int64_t r = static_cast<int64_t>(i) + call;
      const int64_t k = one_each ? 1 : r % 5 == 4 ? 0 : 1 + r % 3;
      const int64_t n = std::min(k, p.total - done[i]);
      s.push_back(&states[i]);
      codes.push_back(p.codes.data() + done[i] * Q);
      frames.push_back(n);
      outs.push_back(&got[i]);
      p.calls.push_back(n);
      done[i] += n;
    }
    if (!left && call > 40) break;
    if (s.empty()) continue;
    const Status st = dec.decode_batch(s, codes, frames, outs);
    EXPECT_TRUE(st.ok()) << "call " << call << ": " << st.error().to_string();
    if (!st.ok()) return {};
  }
  for (size_t i = 0; i < plans.size(); ++i) EXPECT_EQ(states[i].frames(), plans[i].total) << "stream " << i;
  if (calls_made) *calls_made = call;
  return got;
}

// The same stream alone: decode() with the calls it got in the batch.
std::vector<float> run_alone(const CudaDecoder& dec, const StreamPlan& p) {
  auto st = dec.new_state(p.block);
  EXPECT_TRUE(st.ok());
  std::vector<float> out;
  if (!st.ok()) return out;
  int64_t at = 0;
  for (int64_t n : p.calls) {
    EXPECT_TRUE(dec.decode(*st, p.codes.data() + at * dec.num_quantizers(), n, out).ok());
    at += n;
  }
  return out;
}

// One decode() of the whole sequence.
std::vector<float> run_offline(const CudaDecoder& dec, const StreamPlan& p) {
  auto st = dec.new_state(8);
  EXPECT_TRUE(st.ok());
  std::vector<float> out;
  if (st.ok()) {
    EXPECT_TRUE(dec.decode(*st, p.codes.data(), p.total, out).ok());
  }
  return out;
}

struct BatchCase {
  std::string codec;
  int streams;
};

class GpuCodecBatch : public ::testing::TestWithParam<BatchCase> {};

TEST_P(GpuCodecBatch, EqualsPerStreamAndOfflineBitForBit) {
  REQUIRE_GPU();
  const BatchCase bc = GetParam();
  const Loaded& L = codec_of(bc.codec);
  ASSERT_TRUE(L.gpu);
  const CudaDecoder& dec = *L.gpu;
  std::vector<StreamPlan> plans = stream_plans(L.codec.config, bc.streams, 100);
  int64_t calls = 0;
  const std::vector<std::vector<float>> got = run_batched(dec, plans, &calls);
  ASSERT_EQ(got.size(), plans.size());
  const int64_t spf = dec.samples_per_frame();
  size_t distinct = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    ASSERT_EQ(got[i].size(), static_cast<size_t>(plans[i].total * spf)) << "stream " << i;
    EXPECT_TRUE(same_bits(got[i], run_alone(dec, plans[i]))) << "stream " << i << " differs from its solo decode";
    EXPECT_TRUE(same_bits(got[i], run_offline(dec, plans[i]))) << "stream " << i << " differs from its offline decode";
    distinct += i > 0 && got[i] != got[i - 1];
  }
  EXPECT_EQ(distinct, plans.size() - 1);  // not vacuous: every stream's audio is its own
  // The reference: the CPU decoder's one pass, for stream 0 (105 frames: past the window, its
  // ring wrapped). bf16 products are checked against their own solo and offline decodes above
  // (a random codec amplifies their rounding far past the f32 tolerance).
  if (bc.codec == "real_bf16") return;
  auto cpu = codec::Decoder::load(L.codec.ckpt, L.codec.config);
  ASSERT_TRUE(cpu.ok()) << cpu.error().to_string();
  ASSERT_EQ(plans[0].total, 105);
  for (size_t i : {size_t{0}}) {
    auto ref = cpu->decode_all(plans[i].codes.data(), plans[i].total);
    ASSERT_TRUE(ref.ok());
    expect_meaningful(*ref, bc.codec.c_str());
    const double d = max_abs_diff(got[i], *ref);
    EXPECT_LE(d, kMaxAbs) << "stream " << i;
    std::printf("[ codec batch ] %s, %d streams, %lld calls: stream %zu (%lld frames) max |gpu - cpu| = %.3g\n",
                bc.codec.c_str(), bc.streams, static_cast<long long>(calls), i, static_cast<long long>(plans[i].total), d);
  }
  if (bc.codec == "real") {
    const size_t bytes = dec.state_bytes(CudaDecoder::kDefaultBlockFrames);
    std::printf("[ codec batch ] real size: per-stream state %.2f MiB\n", static_cast<double>(bytes) / (1 << 20));
    EXPECT_LE(bytes, size_t{8} << 20);
  }
}

INSTANTIATE_TEST_SUITE_P(Streams, GpuCodecBatch,
                         ::testing::Values(BatchCase{"real", 1}, BatchCase{"real", 3}, BatchCase{"real", 17},
                                           BatchCase{"real", 64}, BatchCase{"real_bf16", 64}, BatchCase{"gqa", 17},
                                           BatchCase{"tiny", 17}),
                         [](const ::testing::TestParamInfo<BatchCase>& i) {
                           return i.param.codec + "_" + std::to_string(i.param.streams);
                         });

// A stream's history or position read through the wrong stream's pointer would make a stream's
// samples depend on another's codes: here only the perturbed stream may change, and only from the
// perturbed frame on.
TEST(GpuCodecBatchIsolation, PerturbingOneStreamChangesOnlyItsOutput) {
  REQUIRE_GPU();
  const Loaded& L = codec_of("real");
  ASSERT_TRUE(L.gpu);
  std::vector<StreamPlan> a = stream_plans(L.codec.config, 17, 300);
  std::vector<StreamPlan> b = a;
  const size_t victim = 5;
  const int64_t Q = L.codec.config.decoder.num_quantizers, frame = 12, spf = L.gpu->samples_per_frame();
  ASSERT_GT(b[victim].total, frame + 1);
  int32_t& code = b[victim].codes[static_cast<size_t>(frame * Q)];
  code = static_cast<int32_t>((code + 1) % L.codec.config.decoder.codebook_size);
  const auto ga = run_batched(*L.gpu, a), gb = run_batched(*L.gpu, b);
  ASSERT_EQ(ga.size(), gb.size());
  for (size_t i = 0; i < ga.size(); ++i) {
    if (i == victim) continue;
    EXPECT_TRUE(same_bits(ga[i], gb[i])) << "stream " << i << " changed with stream " << victim << "'s codes";
  }
  const auto& x = ga[victim];
  const auto& y = gb[victim];
  ASSERT_EQ(x.size(), y.size());
  const size_t cut = static_cast<size_t>(frame * spf);
  EXPECT_EQ(0, std::memcmp(x.data(), y.data(), cut * sizeof(float))) << "samples before the changed frame changed";
  size_t changed = 0;
  for (size_t k = cut; k < cut + static_cast<size_t>(spf); ++k) changed += x[k] != y[k];
  EXPECT_GT(changed, static_cast<size_t>(spf) / 4) << "the changed frame's samples did not change";
}

TEST(GpuCodecBatchErrors, BadInputFailsTheCallAndTouchesNothing) {
  REQUIRE_GPU();
  const Loaded& L = codec_of("gqa");
  ASSERT_TRUE(L.gpu);
  const CudaDecoder& dec = *L.gpu;
  const int64_t Q = dec.num_quantizers();
  constexpr int kStreams = 4;
  std::vector<std::vector<int32_t>> codes;
  std::vector<CudaDecoderState> states;
  std::vector<std::vector<float>> outs(kStreams), want(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    codes.push_back(random_codes(6, L.codec.config, 50 + static_cast<uint32_t>(i)));
    auto st = dec.new_state(4);
    ASSERT_TRUE(st.ok());
    states.push_back(std::move(*st));
    auto solo = dec.new_state(4);
    ASSERT_TRUE(solo.ok());
    ASSERT_TRUE(dec.decode(*solo, codes.back().data(), 6, want[static_cast<size_t>(i)]).ok());
  }
  std::vector<CudaDecoderState*> s;
  std::vector<std::vector<float>*> o;
  for (int i = 0; i < kStreams; ++i) {
    s.push_back(&states[static_cast<size_t>(i)]);
    o.push_back(&outs[static_cast<size_t>(i)]);
  }
  auto ptrs = [&](int64_t at) {
    std::vector<const int32_t*> p;
    for (auto& c : codes) p.push_back(c.data() + at * Q);
    return p;
  };
  const std::vector<int64_t> three(kStreams, 3);
  ASSERT_TRUE(dec.decode_batch(s, ptrs(0), three, o).ok());
  auto untouched = [&](const char* what) {
    for (int i = 0; i < kStreams; ++i) {
      EXPECT_EQ(states[static_cast<size_t>(i)].frames(), 3) << what;
      EXPECT_EQ(outs[static_cast<size_t>(i)].size(), static_cast<size_t>(3 * dec.samples_per_frame())) << what;
    }
  };
  // A code out of range in stream 2: the whole call fails, naming the stream.
  int32_t& bad = codes[2][static_cast<size_t>(4 * Q + 1)];
  const int32_t keep = bad;
  bad = static_cast<int32_t>(dec.codebook_size());
  Status st = dec.decode_batch(s, ptrs(3), three, o);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kOutOfRange);
  EXPECT_NE(st.error().message.find("stream 2"), std::string::npos) << st.error().message;
  untouched("bad code");
  bad = keep;
  // A state twice, an output twice, lists of different lengths.
  auto twice = s;
  twice[3] = twice[0];
  EXPECT_EQ(dec.decode_batch(twice, ptrs(3), three, o).error().code, ErrorCode::kInvalidArgument);
  auto shared = o;
  shared[1] = shared[0];
  EXPECT_EQ(dec.decode_batch(s, ptrs(3), three, shared).error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(dec.decode_batch(s, ptrs(3), std::vector<int64_t>(kStreams - 1, 3), o).ok());
  untouched("bad lists");
  // A flushed state fails the call too.
  auto extra = dec.new_state(4);
  ASSERT_TRUE(extra.ok());
  std::vector<float> extra_out;
  ASSERT_TRUE(dec.flush(*extra, extra_out).ok());
  auto with_flushed = s;
  with_flushed.push_back(&*extra);
  auto outs_flushed = o;
  outs_flushed.push_back(&extra_out);
  auto codes_flushed = ptrs(3);
  codes_flushed.push_back(codes[0].data());
  EXPECT_FALSE(dec.decode_batch(with_flushed, codes_flushed, std::vector<int64_t>(kStreams + 1, 3), outs_flushed).ok());
  untouched("flushed state");
  // The streams go on as if nothing had happened.
  ASSERT_TRUE(dec.decode_batch(s, ptrs(3), three, o).ok());
  for (int i = 0; i < kStreams; ++i)
    EXPECT_TRUE(same_bits(outs[static_cast<size_t>(i)], want[static_cast<size_t>(i)])) << "stream " << i;
}

TEST(GpuCodecBatchCapacity, MoreStreamsThanOneStepHolds) {
  REQUIRE_GPU();
  const Loaded& L = codec_of("real");
  ASSERT_TRUE(L.gpu);
  const CudaDecoder& dec = *L.gpu;
  const int streams = static_cast<int>(CudaDecoder::kBatchFrames) + 22;
  std::vector<StreamPlan> plans(static_cast<size_t>(streams));
  for (int i = 0; i < streams; ++i) {
    plans[static_cast<size_t>(i)].total = 2 + i % 3;
    plans[static_cast<size_t>(i)].block = i % 2 ? 8 : 1;
    plans[static_cast<size_t>(i)].codes = random_codes(plans[static_cast<size_t>(i)].total, L.codec.config, 700 + i);
  }
  // One frame each: 150 streams of n = 1 in every call, two steps of one group per call.
  const auto got = run_batched(dec, plans, nullptr, /*one_each=*/true);
  ASSERT_EQ(got.size(), plans.size());
  for (size_t i = 0; i < plans.size(); ++i)
    EXPECT_TRUE(same_bits(got[i], run_alone(dec, plans[i]))) << "stream " << i;
}

// The Synthesizer on the GPU decodes each step's frames of all requests in one batched pass; each
// request's audio must be the offline decode of its own codes. A second wave of requests runs on
// the decoder states the first wave's streams left (reset for reuse), with the same check.
TEST(GpuCodecBatchEngine, SynthesizerAudioIsTheOfflineDecodeOfEachRequestsCodes) {
  REQUIRE_GPU();
  const std::string dir = test::reference_path("qwen3_tts/models/tiny_custom_voice");
  engine::LoadOptions lo;
  lo.device = engine::Device::cuda(0);
  auto model = engine::load(dir, lo);
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  ASSERT_TRUE((*model)->has_codec() && (*model)->codec().on_gpu());
  engine::Synthesizer synth(*model);
  auto offline = codec::load_cuda_codec(dir);
  ASSERT_TRUE(offline.ok()) << offline.error().to_string();
  const int64_t Q = offline->num_quantizers();
  constexpr int kRequests = 12;
  struct Got {
    std::vector<int32_t> codes;
    std::vector<float> pcm;
  };
  const auto wave = [&](uint64_t seed) {
    std::vector<Got> got(kRequests);
    std::vector<std::shared_ptr<engine::Synthesis>> jobs;
    for (int i = 0; i < kRequests; ++i) {
      engine::SynthesisRequest r = test::golden_request(*test::gen_cases()[0], false);
      r.sampler = {};
      r.depth_sampler = {};
      r.sampler.greedy = false;
      r.depth_sampler.greedy = false;
      r.seed = seed + static_cast<uint64_t>(i);
      r.max_frames = r.min_frames = 8 + (i * 7) % 30;
      Got& g = got[static_cast<size_t>(i)];
      auto j = synth.submit(r, [&g](const engine::AudioChunk& c) {
        g.codes.insert(g.codes.end(), c.codes, c.codes + c.frames * c.codebooks);
        g.pcm.insert(g.pcm.end(), c.samples, c.samples + c.count);
        return ok_status();
      });
      ASSERT_TRUE(j.ok()) << j.error().to_string();
      jobs.push_back(*j);
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * (i % 4)));
    }
    for (int i = 0; i < kRequests; ++i) {
      auto s = jobs[static_cast<size_t>(i)]->wait();
      ASSERT_TRUE(s.ok()) << s.error().to_string();
      const Got& g = got[static_cast<size_t>(i)];
      const int64_t frames = static_cast<int64_t>(g.codes.size()) / Q;
      ASSERT_EQ(frames, s->frames);
      auto st = offline->new_state();
      ASSERT_TRUE(st.ok());
      std::vector<float> want;
      ASSERT_TRUE(offline->decode(*st, g.codes.data(), frames, want).ok());
      EXPECT_TRUE(same_bits(g.pcm, want)) << "seed " << seed << ", request " << i << " (" << frames << " frames)";
      double peak = 0;
      for (float v : want) peak = std::max(peak, static_cast<double>(std::fabs(v)));
      EXPECT_GT(peak, 1e-4) << "request " << i << ": silent";
    }
  };
  wave(900);
  // Every stream of the first wave has ended and left its state for the next ones: as many states
  // as streams ran at once, which depends on how fast the early ones ended (a request that starts
  // after another ended takes its state).
  const size_t first = (*model)->codec().kept_states();
  EXPECT_GE(first, 1u);
  EXPECT_LE(first, static_cast<size_t>(kRequests));
  wave(1900);
  // None lost, and the second wave reused them: never more than one wave's requests (24 without reuse).
  EXPECT_GE((*model)->codec().kept_states(), first);
  EXPECT_LE((*model)->codec().kept_states(), static_cast<size_t>(kRequests));
}

}  // namespace
}  // namespace chorus::gpu_test
