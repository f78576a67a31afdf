// Text that arrives while its request runs (Synthesizer::submit_text): however the text is cut
// into deltas and however long the writer pauses between them, the codes must be those of the
// same request given its whole text (submit()), for greedy and sampled runs, in every mode of
// the streaming text layout. A waiting request holds up no other, and can be cancelled.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <random>
#include <thread>

#include "engine/model.h"
#include "engine/qwen3_text_input.h"
#include "engine/qwen3_tts_engine.h"
#include "engine/synthesizer.h"
#include "models/qwen3_tts/checkpoint.h"
#include "models/qwen3_tts/presets.h"
#include "models/qwen3_tts/prompt.h"
#include "models/qwen3_tts/stream.h"
#include "support/test_support.h"

namespace chorus::test {
namespace {

using engine::SynthesisRequest;
namespace q3 = qwen3_tts;

// make-tiny checkpoints (random weights, a small byte-level tokenizer, the codec), made once.
std::shared_ptr<const engine::Model> tiny(q3::Variant v) {
  static std::map<q3::Variant, std::shared_ptr<const engine::Model>> models;
  auto& m = models[v];
  if (!m) {
    const std::string dir = scratch_dir(std::string("text_input_") + q3::variant_name(v));
    EXPECT_TRUE(q3::write_random_model(dir, q3::preset_config(v, q3::Dims::kTiny), 11).ok());
    auto loaded = engine::load(dir, {});
    EXPECT_TRUE(loaded.ok()) << loaded.error().to_string();
    if (loaded.ok()) m = *loaded;
  }
  return m;
}

int64_t hidden_of(const engine::Model& m) {
  return dynamic_cast<const engine::Qwen3TtsEngine&>(m.generator()).model().hidden();
}

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = {
      "Hello there, how are you doing today? I'm fine.",
      "It's 3.14, isn't it?  Two  spaces\nand a new line!",
      "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xE3\x80\x82 OK, caf\xC3\xA9 na\xC3\xAFve.",
  };
  return t;
}

enum class Mode { kCustomVoice, kXVector, kIcl, kIclLongRef };

SynthesisRequest request(Mode mode, const engine::Model& m, uint64_t seed, bool greedy) {
  SynthesisRequest r;
  if (mode == Mode::kCustomVoice) {
    r.speaker = "vivian";
    r.layout = engine::TextLayout::kStreaming;
  } else {
    std::mt19937 rng(static_cast<uint32_t>(seed) + 5);
    std::normal_distribution<float> nd(0.0f, 0.5f);
    r.speaker_embedding.resize(static_cast<size_t>(hidden_of(m)));
    for (float& v : r.speaker_embedding) v = nd(rng);
    r.xvector_only = mode == Mode::kXVector;
    if (!r.xvector_only) {
      // Few reference frames (their text runs on into the trailing rows) or many (the prefill
      // takes several target tokens besides the reference text).
      const int frames = mode == Mode::kIcl ? 2 : 9;
      r.ref_text = mode == Mode::kIcl ? "A reference, long enough." : "Hi.";
      for (int f = 0; f < frames; ++f) {
        std::vector<int32_t> codes(16);
        for (auto& c : codes) c = static_cast<int32_t>(rng() % 2048);
        r.ref_codes.push_back(codes);
      }
    }
  }
  r.language = "english";
  r.sampler.greedy = r.depth_sampler.greedy = greedy;
  r.seed = seed;
  r.max_frames = 48;
  return r;
}

struct TextRun {
  std::vector<int32_t> codes;
  std::vector<float> pcm;
  engine::StopReason stop = engine::StopReason::kRunning;
  int64_t text_tokens = 0, max_frames = 0;
  int64_t frames_before_finish = -1;
  bool ok = false;
};

engine::ChunkCallback collect(TextRun& r, std::atomic<int64_t>* frames) {
  return [&r, frames](const engine::AudioChunk& c) {
    r.codes.insert(r.codes.end(), c.codes, c.codes + c.frames * c.codebooks);
    r.pcm.insert(r.pcm.end(), c.samples, c.samples + c.count);
    if (frames) *frames += c.frames;
    return ok_status();
  };
}

TextRun whole_text(engine::Synthesizer& synth, SynthesisRequest r, const std::string& text, bool audio) {
  r.text = text;
  TextRun run;
  engine::SynthesisOptions o;
  o.audio = audio;
  auto st = synth.synthesize(r, collect(run, nullptr), o);
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  if (st.ok()) {
    run.ok = true;
    run.stop = st->stop;
    run.text_tokens = st->text_tokens;
    run.max_frames = st->max_frames;
  }
  return run;
}

// The text in random deltas (1..max_len bytes, splits inside UTF-8 characters included) written
// on another thread, with random pauses of up to max_sleep_us between them.
TextRun in_pieces(engine::Synthesizer& synth, const SynthesisRequest& r, const std::string& text, uint32_t seed,
              size_t max_len, int max_sleep_us, bool audio) {
  TextRun run;
  std::atomic<int64_t> frames{0};
  engine::SynthesisOptions o;
  o.audio = audio;
  auto h = synth.submit_text(r, collect(run, &frames), o);
  EXPECT_TRUE(h.ok()) << h.error().to_string();
  if (!h.ok()) return run;
  std::shared_ptr<engine::Synthesis> handle = *h;
  std::thread writer([&] {
    std::mt19937 rng(seed);
    size_t at = 0;
    while (at < text.size()) {
      const size_t n = std::min(text.size() - at, std::uniform_int_distribution<size_t>(1, max_len)(rng));
      EXPECT_TRUE(handle->append_text(std::string_view(text).substr(at, n)).ok());
      at += n;
      const int us = std::uniform_int_distribution<int>(0, max_sleep_us)(rng);
      if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
    run.frames_before_finish = frames.load();
    EXPECT_TRUE(handle->finish_text().ok());
  });
  auto st = handle->wait();
  writer.join();
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  if (st.ok()) {
    run.ok = true;
    run.stop = st->stop;
    run.text_tokens = st->text_tokens;
    run.max_frames = st->max_frames;
  }
  return run;
}

void check_mode(Mode mode, q3::Variant variant) {
  auto m = tiny(variant);
  ASSERT_TRUE(m);
  engine::Synthesizer synth(m);
  int compared = 0;
  int64_t spoke_early = 0;
  for (uint64_t seed = 0; seed < 3; ++seed)
    for (bool greedy : {true, false})
      for (size_t t = 0; t < texts().size(); ++t) {
        SCOPED_TRACE("seed " + std::to_string(seed) + (greedy ? " greedy" : " sampled") + " text " + std::to_string(t));
        SynthesisRequest r = request(mode, *m, seed, greedy);
        // A tight length cap on some runs, so the cap that more text raises is in play.
        if (t == 1) r.length_cap = {0.5, 2};
        const TextRun want = whole_text(synth, r, texts()[t], false);
        ASSERT_TRUE(want.ok);
        ASSERT_GT(want.codes.size(), 16u * 5);
        const uint32_t s = static_cast<uint32_t>(seed * 10 + t);
        const TextRun got = in_pieces(synth, r, texts()[t], s, 1 + s % 7, (s % 3) * 1500, false);
        ASSERT_TRUE(got.ok);
        EXPECT_EQ(got.codes, want.codes);
        EXPECT_EQ(got.stop, want.stop);
        // A request that stops (at its frame limit) before the text is finished counts the
        // tokens it had read; its limit is the one the whole-text run had.
        EXPECT_LE(got.text_tokens, want.text_tokens);
        if (got.text_tokens == want.text_tokens) {
          EXPECT_EQ(got.max_frames, want.max_frames);
        }
        spoke_early += got.frames_before_finish > 0;
        ++compared;
      }
  EXPECT_EQ(compared, 18);
  // Not vacuous: with pauses, frames came while the text was still being written.
  EXPECT_GT(spoke_early, 0);
}

TEST(TextInput, CustomVoiceStreamingLayoutEqualsWholeText) { check_mode(Mode::kCustomVoice, q3::Variant::kCustomVoice); }
TEST(TextInput, XVectorCloneEqualsWholeText) { check_mode(Mode::kXVector, q3::Variant::kBase); }
TEST(TextInput, InContextCloneEqualsWholeText) { check_mode(Mode::kIcl, q3::Variant::kBase); }
TEST(TextInput, InContextCloneWithLongReferenceEqualsWholeText) { check_mode(Mode::kIclLongRef, q3::Variant::kBase); }

// Also with the codec's decode overlapped with the next step, while the request waits for text
// between pieces (the scheduler then has a decode to complete and nothing to step).
TEST(TextInput, AudioEqualsWholeText) {
  auto m = tiny(q3::Variant::kCustomVoice);
  ASSERT_TRUE(m);
  std::vector<float> in_line;
  for (auto overlap : {engine::SynthesizerOptions::CodecOverlap::kOff, engine::SynthesizerOptions::CodecOverlap::kOn}) {
    engine::SynthesizerOptions so;
    so.codec_overlap = overlap;
    engine::Synthesizer synth(m, so);
    const SynthesisRequest r = request(Mode::kCustomVoice, *m, 4, false);
    const TextRun want = whole_text(synth, r, texts()[0], true);
    const TextRun got = in_pieces(synth, r, texts()[0], 9, 3, 2000, true);
    ASSERT_TRUE(want.ok && got.ok);
    EXPECT_GT(want.pcm.size(), 1000u);
    EXPECT_EQ(got.codes, want.codes);
    EXPECT_EQ(got.pcm, want.pcm);
    if (in_line.empty()) in_line = want.pcm;
    else EXPECT_EQ(want.pcm, in_line);
  }
}

// The whole text first, or nothing but finish_text() later: still the same codes.
TEST(TextInput, AllAtOnceAndEmptyEdgeCases) {
  auto m = tiny(q3::Variant::kCustomVoice);
  ASSERT_TRUE(m);
  engine::Synthesizer synth(m);
  const SynthesisRequest r = request(Mode::kCustomVoice, *m, 1, true);
  const TextRun want = whole_text(synth, r, "Hi", false);
  const TextRun got = in_pieces(synth, r, "Hi", 1, 100, 0, false);
  EXPECT_EQ(got.codes, want.codes);
  // No text at all fails as a request with empty text ids would: a typed error, not a hang.
  auto h = synth.submit_text(r, nullptr);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE((*h)->finish_text().ok());
  auto st = (*h)->wait();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kInvalidArgument);
  // Text after the end, and text for a request that has its own.
  EXPECT_FALSE((*h)->append_text("more").ok());
  SynthesisRequest with_text = r;
  with_text.text = "x";
  auto whole = synth.submit(with_text, nullptr);
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE((*whole)->takes_text());
  EXPECT_FALSE((*whole)->append_text("x").ok());
  EXPECT_TRUE((*whole)->wait().ok());
  EXPECT_FALSE(synth.submit_text(with_text, nullptr).ok());
}

TEST(TextInput, FullTextLayoutIsRefusedWithAClearError) {
  auto m = tiny(q3::Variant::kCustomVoice);
  ASSERT_TRUE(m);
  engine::Synthesizer synth(m);
  SynthesisRequest r = request(Mode::kCustomVoice, *m, 0, true);
  r.layout = engine::TextLayout::kModelDefault;  // CustomVoice's default is the full-text layout
  auto h = synth.submit_text(r, nullptr);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.error().code, ErrorCode::kUnsupported);
  EXPECT_NE(h.error().message.find("streaming text layout"), std::string::npos) << h.error().message;
  r.speaker = "nobody";  // the rest of the request is checked at once
  r.layout = engine::TextLayout::kStreaming;
  auto bad = synth.submit_text(r, nullptr);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("unknown speaker"), std::string::npos);
}

// A request waiting for text leaves the others running: one submitted later finishes, with its
// solo codes, while the first still waits; then the first finishes as its whole-text run.
TEST(TextInput, AWaitingRequestHoldsUpNoOther) {
  auto m = tiny(q3::Variant::kCustomVoice);
  ASSERT_TRUE(m);
  engine::Synthesizer synth(m);
  const SynthesisRequest r = request(Mode::kCustomVoice, *m, 2, false);
  const std::string text = texts()[0];
  const TextRun want_waiting = whole_text(synth, r, text, false);
  const TextRun want_other = whole_text(synth, request(Mode::kCustomVoice, *m, 3, false), texts()[1], false);

  TextRun waiting;
  std::atomic<int64_t> frames{0};
  engine::SynthesisOptions o;
  o.audio = false;
  auto h = synth.submit_text(r, collect(waiting, &frames), o);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->append_text(text.substr(0, 12)).ok());  // "Hello there," then nothing for a while
  TextRun other;
  SynthesisRequest other_r = request(Mode::kCustomVoice, *m, 3, false);
  other_r.text = texts()[1];
  auto st = synth.synthesize(other_r, collect(other, nullptr), o);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(other.codes, want_other.codes);
  EXPECT_FALSE((*h)->done());
  // It made only the frames its first tokens allow.
  EXPECT_GT(frames.load(), 0);
  EXPECT_LT(frames.load() * 16, static_cast<int64_t>(want_waiting.codes.size()) / 2);
  ASSERT_TRUE((*h)->append_text(text.substr(12)).ok());
  ASSERT_TRUE((*h)->finish_text().ok());
  ASSERT_TRUE((*h)->wait().ok());
  EXPECT_EQ(waiting.codes, want_waiting.codes);
}

TEST(TextInput, CancelWhileWaitingForText) {
  auto m = tiny(q3::Variant::kCustomVoice);
  ASSERT_TRUE(m);
  engine::Synthesizer synth(m);
  std::atomic<int64_t> frames{0};
  TextRun run;
  auto h = synth.submit_text(request(Mode::kCustomVoice, *m, 0, true), collect(run, &frames));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->append_text("Hello there, how are").ok());
  // Wait until it has spoken what it can, so it sits waiting with the scheduler asleep.
  for (int i = 0; i < 2000 && frames.load() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_GE(frames.load(), 2);
  (*h)->cancel();
  auto done = std::async(std::launch::async, [&] { return (*h)->wait(); });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "cancel did not wake the scheduler";
  auto st = done.get();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->stop, engine::StopReason::kCancelled);
  EXPECT_EQ(synth.load().running, 0);
}

// A server learns that a text request ended through on_done, as for submit().
TEST(TextInput, OnDoneIsCalledWithTheResult) {
  auto m = tiny(q3::Variant::kCustomVoice);
  ASSERT_TRUE(m);
  engine::Synthesizer synth(m);
  std::atomic<int64_t> frames{0};
  TextRun run;
  std::promise<Result<engine::SynthesisStats>> got;
  engine::SynthesisOptions o;
  o.on_done = [&](const Result<engine::SynthesisStats>& r) { got.set_value(r); };
  auto h = synth.submit_text(request(Mode::kCustomVoice, *m, 0, true), collect(run, &frames), o);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->append_text("Hello there.").ok());
  ASSERT_TRUE((*h)->finish_text().ok());
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "on_done was not called";
  auto r = f.get();
  ASSERT_TRUE(r.ok());
  EXPECT_GT(r->frames, 0);
  EXPECT_EQ(r->frames, frames.load());
}

// A writer that stops writing leaves its request waiting; its deadline still ends it (the
// sleeping scheduler wakes for it).
TEST(TextInput, DeadlineEndsARequestWaitingForText) {
  auto m = tiny(q3::Variant::kCustomVoice);
  ASSERT_TRUE(m);
  engine::Synthesizer synth(m);
  engine::SynthesisOptions o;
  o.audio = false;
  o.total_deadline_s = 0.5;
  auto h = synth.submit_text(request(Mode::kCustomVoice, *m, 0, true), nullptr, o);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE((*h)->append_text("Hello there, how are").ok());
  auto done = std::async(std::launch::async, [&] { return (*h)->wait(); });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the deadline did not end it";
  auto st = done.get();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(st.error().message.find("total deadline"), std::string::npos) << st.error().message;
}

// The host side both engines share (Qwen3TextInput, which the GPU engine feeds its slots from):
// for any cut of the text, the prompt it starts with and the rows it hands out rebuild the whole
// text's prompt exactly (prefill, trailing rows, pad row) and frame limit, and before the text is
// finished it never lets a frame be made whose row has not come.
TEST(TextInput, HostSideRebuildsTheWholeTextPrompt) {
  int compared = 0, started_early = 0;
  for (Mode mode : {Mode::kCustomVoice, Mode::kXVector, Mode::kIcl, Mode::kIclLongRef}) {
    auto m = tiny(mode == Mode::kCustomVoice ? q3::Variant::kCustomVoice : q3::Variant::kBase);
    ASSERT_TRUE(m);
    const auto& engine = dynamic_cast<const engine::Qwen3TtsEngine&>(m->generator());
    for (size_t t = 0; t < texts().size(); ++t) {
      SCOPED_TRACE("mode " + std::to_string(static_cast<int>(mode)) + " text " + std::to_string(t));
      SynthesisRequest r = request(mode, *m, t, false);
      if (t == 1) r.length_cap = {0.5, 2};
      SynthesisRequest whole_r = r;
      whole_r.text = texts()[t];
      auto in = engine.prompt_inputs(whole_r);
      ASSERT_TRUE(in.ok());
      auto want = q3::build_prompt(engine.model(), *in);
      ASSERT_TRUE(want.ok());
      auto want_stream = engine.create_stream(whole_r);
      ASSERT_TRUE(want_stream.ok());

      auto input = engine.text_input(r);
      ASSERT_TRUE(input.ok()) << input.error().to_string();
      engine::Qwen3TextInput& x = **input;
      q3::Prompt got;
      int64_t max_frames = 0;
      const auto take = [&] {
        x.read();
        if (x.can_start()) {
          auto st = x.start();
          ASSERT_TRUE(st.ok()) << st.error().to_string();
          got = std::move(st->prompt);
          max_frames = st->settings.max_frames;
          started_early += !x.closed();
        }
        auto rows = x.take_rows();
        ASSERT_TRUE(rows.ok()) << rows.error().to_string();
        got.trailing.insert(got.trailing.end(), rows->data.begin(), rows->data.end());
        got.trailing_rows += rows->count;
        if (rows->closed) max_frames = rows->cap_frames;
        if (x.started() && !x.closed()) {
          EXPECT_FALSE(x.may_make(got.trailing_rows, got.trailing_rows));
        }
      };
      const std::string& text = texts()[t];
      std::mt19937 rng(static_cast<uint32_t>(t) + 3);
      for (size_t at = 0; at < text.size();) {
        const size_t n = std::min(text.size() - at, size_t{1} + rng() % 5);
        ASSERT_TRUE(x.feed()->append(std::string_view(text).substr(at, n)).ok());
        at += n;
        take();
      }
      ASSERT_TRUE(x.feed()->finish().ok());
      take();
      ASSERT_TRUE(x.closed());
      EXPECT_TRUE(x.may_make(got.trailing_rows + 5, got.trailing_rows));  // past the text: the pad row
      EXPECT_EQ(got.prefill_rows, want->prefill_rows);
      EXPECT_EQ(got.prefill, want->prefill);
      EXPECT_EQ(got.trailing_rows, want->trailing_rows);
      EXPECT_EQ(got.trailing, want->trailing);
      EXPECT_EQ(got.pad, want->pad);
      EXPECT_EQ(max_frames, (*want_stream)->max_frames());
      EXPECT_EQ(x.text_tokens(), want->text_tokens);
      ++compared;
    }
  }
  EXPECT_EQ(compared, 12);
  EXPECT_GT(started_early, 6);  // not vacuous: most started before their text was finished
}

// The planted bug: a stream that, instead of waiting, goes on with the tts_pad row where the
// text's next row has not come yet (and gets the rest later) must be caught by the comparison
// the tests above make. The same schedule with waiting matches.
TEST(TextInput, NotWaitingForTextIsCaught) {
  auto m = tiny(q3::Variant::kCustomVoice);
  ASSERT_TRUE(m);
  const auto& engine = dynamic_cast<const engine::Qwen3TtsEngine&>(m->generator());
  SynthesisRequest r = request(Mode::kCustomVoice, *m, 0, true);
  r.text = texts()[0];
  auto in = engine.prompt_inputs(r);
  ASSERT_TRUE(in.ok());
  q3::GenerationSettings g = engine.settings(r);
  g.max_frames = 30;
  auto run = [&](bool wait) {
    auto prompt = q3::build_prompt(engine.model(), *in);
    EXPECT_TRUE(prompt.ok());
    const int64_t H = prompt->hidden, rows = prompt->trailing_rows;
    EXPECT_GT(rows, 6);
    const std::vector<float> all = prompt->trailing;
    prompt->trailing.resize(static_cast<size_t>(3 * H));  // three rows have arrived
    prompt->trailing_rows = 3;
    auto s = q3::Stream::create(std::shared_ptr<const q3::Model>(m, &engine.model()), std::move(*prompt), g);
    EXPECT_TRUE(s.ok());
    std::vector<int32_t> codes;
    std::vector<q3::FrameOutput> out(1);
    q3::Stream* p = s->get();
    while (!p->finished()) {
      // The rest of the text arrives after frame 5 (or, waiting, before it is needed).
      if (p->trailing_rows() == 3 && (p->frames() >= 5 || (wait && p->frames() >= 3)))
        p->append_trailing(all.data() + 3 * H, rows - 3);
      EXPECT_TRUE(q3::step_streams({&p, 1}, out).ok());
      codes.insert(codes.end(), out[0].codes.begin(), out[0].codes.end());
    }
    return codes;
  };
  engine::Synthesizer synth(m);
  const TextRun want = whole_text(synth, request(Mode::kCustomVoice, *m, 0, true), texts()[0], false);
  std::vector<int32_t> want30(want.codes.begin(), want.codes.begin() + std::min<size_t>(want.codes.size(), 30 * 16));
  EXPECT_EQ(run(true), want30);
  EXPECT_NE(run(false), want30);
}

}  // namespace
}  // namespace chorus::test
