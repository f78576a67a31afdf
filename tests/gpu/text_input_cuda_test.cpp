// Text that arrives while its request runs, on the GPU (Qwen3-TTS, streaming text layout): however
// the text is cut and however long it pauses, a request's codes equal those of the same request
// with its whole text on the GPU, while requests with their whole text share its frame pool; a
// request waiting for text holds its slot, parked, and holds up no other. The frame core's parking
// itself: a parked slot comes out of the frames run meanwhile as it went in, and a slot that waits
// but runs anyway (the planted bug) gives other codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/model.h"
#include "engine/synthesizer.h"
#include "engine/text_feed.h"
#include "engine/tts_model.h"
#include "generation/golden_cases.h"
#include "gpu_test_util.h"
#include "models/qwen3_tts/checkpoint.h"
#include "models/qwen3_tts/frame_batch_cuda.h"
#include "models/qwen3_tts/presets.h"
#include "models/qwen3_tts/prompt.h"
#include "nn/kv_page_pool_cuda.h"
#include "support/test_support.h"

namespace chorus::gpu_test {
namespace {

namespace q3 = qwen3_tts;
using Codes = std::vector<std::vector<int32_t>>;

// make-tiny checkpoints (random weights, a small byte-level tokenizer), written once per variant.
std::string tiny_dir(q3::Variant v) {
  static std::map<q3::Variant, std::string> dirs;
  auto& d = dirs[v];
  if (d.empty()) {
    d = test::scratch_dir(std::string("gpu_text_input_") + q3::variant_name(v));
    const Status st = q3::write_random_model(d, q3::preset_config(v, q3::Dims::kTiny), 11);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
  }
  return d;
}

std::unique_ptr<engine::TtsModel> load_gpu(const std::string& dir) {
  engine::LoadOptions o;
  o.device = engine::Device::cuda(0);
  auto m = engine::load_tts_model(dir, o);
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = {
      "Hello there, how are you doing today? I'm fine.",
      "It's 3.14, isn't it?  Two  spaces\nand a new line!",
      "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xE3\x80\x82 OK, caf\xC3\xA9 na\xC3\xAFve.",
      "Short one.",
  };
  return t;
}

enum class Mode { kCustomVoice, kXVector, kIcl, kIclLongRef };

// Requests that differ in every way a pool keeps apart (seed, RNG stream, sampler, penalty, length
// cap), in the streaming text layout.
engine::SynthesisRequest request(Mode mode, int64_t hidden, uint32_t i) {
  std::mt19937 rng(i * 7 + 3);
  engine::SynthesisRequest r;
  if (mode == Mode::kCustomVoice) {
    r.speaker = i % 2 ? "vivian" : "ryan";
  } else {
    std::normal_distribution<float> nd(0.0f, 0.5f);
    r.speaker_embedding.resize(static_cast<size_t>(hidden));
    for (float& v : r.speaker_embedding) v = nd(rng);
    r.xvector_only = mode == Mode::kXVector;
    if (!r.xvector_only) {
      const int frames = mode == Mode::kIcl ? 2 : 9;
      r.ref_text = mode == Mode::kIcl ? "A reference, long enough." : "Hi.";
      for (int f = 0; f < frames; ++f) {
        std::vector<int32_t> codes(16);
        for (auto& c : codes) c = static_cast<int32_t>(rng() % 2048);
        r.ref_codes.push_back(codes);
      }
    }
  }
  r.layout = engine::TextLayout::kStreaming;
  r.language = "english";
  r.sampler.greedy = r.depth_sampler.greedy = i % 4 == 1;
  if (i % 3 == 2) r.sampler.repetition_penalty = 1.3f;
  if (i % 5 == 3) r.length_cap = {0.5, 2};  // a tight cap, which more text raises
  r.seed = 100 + i;
  r.rng_stream = i % 3;
  r.max_frames = 48;
  return r;
}

struct Outcome {
  Codes codes;
  engine::StopReason stop = engine::StopReason::kRunning;
};

// The request with its whole text, alone on a model of its own (a fresh pool).
Outcome whole_text_alone(const std::string& dir, engine::SynthesisRequest r, const std::string& text) {
  Outcome o;
  auto m = load_gpu(dir);
  if (!m) return o;
  r.text = text;
  auto s = m->create_stream(r);
  EXPECT_TRUE(s.ok()) << s.error().to_string();
  if (!s.ok()) return o;
  engine::TtsStream* p = s->get();
  std::vector<engine::StepResult> out(1);
  while (!p->finished()) {
    const Status st = m->step({&p, 1}, out);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    if (!st.ok()) return o;
    if (out[0].has_frame) o.codes.push_back(out[0].codes);
  }
  o.stop = p->stop_reason();
  return o;
}

struct Live {
  std::unique_ptr<engine::TtsStream> stream;
  std::shared_ptr<engine::TextFeed> feed;  // null: a request with its whole text
  std::vector<std::string> deltas;         // the text cut anywhere (inside UTF-8 characters too)
  size_t next_delta = 0;
  int pause = 0;
  bool text_finished = false;
  int64_t frames_at_finish = -1;
};

struct Schedule {
  std::vector<Outcome> got;
  int waited_mid_run = 0;    // steps a stream that had spoken sat out while others made frames
  int spoke_early = 0;       // requests in pieces with frames before their text was finished
  int passed_waiting = 0;    // waiting streams passed to step() anyway (they must make no frame)
};

// The requests arriving at random steps into one model's pools, as the Synthesizer steps them:
// every stream is asked ready() first, the ready ones are stepped (and now and then a waiting one
// too). Text comes a delta per step with random pauses of several steps. At most 4 streams at
// once: the code predictor's first step then sees at most 8 rows, the few-row kernels whose
// results do not depend on the other rows (docs/cuda.md, kGemvMaxRows), so the whole-text runs
// alone are an exact reference.
constexpr size_t kMaxLive = 4;

Schedule in_pieces(const engine::TtsModel& m, const std::vector<engine::SynthesisRequest>& rs,
                   const std::vector<std::string>& text_of, const std::vector<bool>& pieces, uint32_t seed) {
  std::mt19937 rng(seed);
  Schedule sch;
  sch.got.resize(rs.size());
  std::vector<Live> live_of(rs.size());
  std::vector<size_t> live;
  size_t next = 0;
  for (int guard = 0; (next < rs.size() || !live.empty()) && guard < 20000; ++guard) {
    for (size_t a = rng() % 3; a > 0 && next < rs.size() && live.size() < kMaxLive; --a, ++next) {
      Live& l = live_of[next];
      if (pieces[next]) {
        auto s = m.create_text_stream(rs[next], &l.feed);
        EXPECT_TRUE(s.ok()) << s.error().to_string();
        if (!s.ok()) return sch;
        l.stream = std::move(s).value();
        const std::string& t = text_of[next];
        const size_t max_len = 1 + rng() % 6;
        for (size_t at = 0; at < t.size();) {
          const size_t n = std::min(t.size() - at, 1 + rng() % max_len);
          l.deltas.push_back(t.substr(at, n));
          at += n;
        }
      } else {
        engine::SynthesisRequest r = rs[next];
        r.text = text_of[next];
        auto s = m.create_stream(r);
        EXPECT_TRUE(s.ok()) << s.error().to_string();
        if (!s.ok()) return sch;
        l.stream = std::move(s).value();
      }
      live.push_back(next);
    }
    for (size_t i : live) {
      Live& l = live_of[i];
      if (!l.feed || l.text_finished) continue;
      if (l.pause > 0) {
        --l.pause;
        continue;
      }
      if (rng() % 6 == 0) l.pause = 2 + static_cast<int>(rng() % 12);
      if (l.next_delta < l.deltas.size()) {
        EXPECT_TRUE(l.feed->append(l.deltas[l.next_delta++]).ok());
      } else {
        l.frames_at_finish = l.stream->frames();
        EXPECT_TRUE(l.feed->finish().ok());
        l.text_finished = true;
      }
    }
    std::vector<engine::TtsStream*> step;
    std::vector<size_t> which;
    std::vector<size_t> waiting_started;
    for (size_t i : live) {
      engine::TtsStream* s = live_of[i].stream.get();
      auto ready = s->ready();
      EXPECT_TRUE(ready.ok()) << ready.error().to_string();
      if (!ready.ok()) return sch;
      if (!*ready && s->frames() > 0) waiting_started.push_back(i);
      if (*ready || rng() % 6 == 0) {
        sch.passed_waiting += !*ready;
        step.push_back(s);
        which.push_back(i);
      }
    }
    if (!step.empty()) {
      std::vector<engine::StepResult> out(step.size());
      const Status st = m.step(step, out);
      EXPECT_TRUE(st.ok()) << st.error().to_string();
      if (!st.ok()) return sch;
      bool made = false;
      for (size_t k = 0; k < step.size(); ++k) {
        const bool waited = std::find(waiting_started.begin(), waiting_started.end(), which[k]) != waiting_started.end();
        EXPECT_FALSE(waited && out[k].has_frame) << "a waiting stream made a frame";
        if (out[k].has_frame) sch.got[which[k]].codes.push_back(out[k].codes);
        made = made || out[k].has_frame;
      }
      if (made) sch.waited_mid_run += static_cast<int>(waiting_started.size());
    }
    std::erase_if(live, [&](size_t i) {
      Live& l = live_of[i];
      if (!l.stream->finished()) return false;
      sch.got[i].stop = l.stream->stop_reason();
      sch.spoke_early += l.feed && (l.frames_at_finish > 0 || !l.text_finished);
      l.stream.reset();
      return true;
    });
  }
  EXPECT_TRUE(live.empty()) << "the schedule did not end";
  return sch;
}

void expect_pieces_equal_whole_text(q3::Variant variant, const std::vector<Mode>& modes, int n, uint32_t seed) {
  const std::string dir = tiny_dir(variant);
  auto m = load_gpu(dir);
  ASSERT_TRUE(m);
  const int64_t hidden = q3::preset_config(variant, q3::Dims::kTiny).talker.dims.hidden;
  std::vector<engine::SynthesisRequest> rs;
  std::vector<std::string> text_of;
  std::vector<bool> pieces;
  for (int i = 0; i < n; ++i) {
    rs.push_back(request(modes[static_cast<size_t>(i) % modes.size()], hidden, static_cast<uint32_t>(i)));
    text_of.push_back(texts()[static_cast<size_t>(i) % texts().size()]);
    pieces.push_back(i % 3 != 2);  // a third have their whole text, in the same pools
  }
  const Schedule sch = in_pieces(*m, rs, text_of, pieces, seed);
  ASSERT_EQ(sch.got.size(), rs.size());
  size_t frames = 0;
  int distinct = 0;
  Codes previous;
  for (size_t i = 0; i < rs.size(); ++i) {
    const Outcome want = whole_text_alone(dir, rs[i], text_of[i]);
    ASSERT_FALSE(want.codes.empty()) << "request " << i;
    EXPECT_EQ(sch.got[i].codes, want.codes) << "request " << i << (pieces[i] ? " (text in pieces)" : "") << ": "
                                            << sch.got[i].codes.size() << " vs " << want.codes.size() << " frames";
    EXPECT_EQ(sch.got[i].stop, want.stop) << "request " << i;
    frames += want.codes.size();
    distinct += want.codes != previous;
    previous = want.codes;
  }
  // Not vacuous: real and differing codes, requests that spoke before their text was finished,
  // streams that sat out steps in which others made frames (parked in their slots), and waiting
  // streams passed to step() anyway.
  EXPECT_GT(frames, rs.size() * 5);
  EXPECT_GT(distinct, n / 2);
  EXPECT_GT(sch.spoke_early, 0);
  EXPECT_GT(sch.waited_mid_run, 5);
  EXPECT_GT(sch.passed_waiting, 0);
  // The engine's backbone caches are paged: with every request ended, all its pages are back
  // (parked slots took none of their own, text streams' reservations were returned).
  const std::optional<nn::KvPageStats> kv = m->kv_pages();
  ASSERT_TRUE(kv.has_value());
  EXPECT_GT(kv->total, 0) << "the requests ran without pages";
  EXPECT_EQ(kv->free, kv->total);
  EXPECT_EQ(kv->promised, 0);
  std::printf("[gpu text in pieces] %s: %d requests, %zu frames, %d spoke early, %d waits beside running streams\n",
              q3::variant_name(variant), n, frames, sch.spoke_early, sch.waited_mid_run);
}

TEST(GpuTextInput, PiecesAndPausesInASharedPoolGiveTheWholeTextCodes) {
  REQUIRE_GPU();
  expect_pieces_equal_whole_text(q3::Variant::kCustomVoice, {Mode::kCustomVoice}, 24, 5);
}

TEST(GpuTextInput, VoiceCloneModesToo) {
  REQUIRE_GPU();
  expect_pieces_equal_whole_text(q3::Variant::kBase, {Mode::kXVector, Mode::kIcl, Mode::kIclLongRef}, 18, 9);
}

// Through the Synthesizer, with a writer thread that pauses for real: the scheduler leaves the
// waiting request out of its steps while a whole-text request runs beside it.
TEST(GpuTextInput, SynthesizerTakesTextInPiecesOnCuda) {
  REQUIRE_GPU();
  const std::string dir = tiny_dir(q3::Variant::kCustomVoice);
  engine::LoadOptions lo;
  lo.device = engine::Device::cuda(0);
  lo.codec = false;
  auto model = engine::load(dir, lo);
  ASSERT_TRUE(model.ok()) << model.error().to_string();
  const int64_t hidden = q3::preset_config(q3::Variant::kCustomVoice, q3::Dims::kTiny).talker.dims.hidden;
  engine::Synthesizer synth(*model);
  engine::SynthesisOptions o;
  o.audio = false;
  const auto collect = [](Codes& into, std::atomic<int64_t>* frames) {
    return [&into, frames](const engine::AudioChunk& c) {
      for (int64_t f = 0; f < c.frames; ++f) into.emplace_back(c.codes + f * c.codebooks, c.codes + (f + 1) * c.codebooks);
      if (frames) *frames += c.frames;
      return ok_status();
    };
  };
  for (uint32_t i = 0; i < 3; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const engine::SynthesisRequest r = request(Mode::kCustomVoice, hidden, i);
    const std::string& text = texts()[i];
    const Outcome want = whole_text_alone(dir, r, text);
    engine::SynthesisRequest other = request(Mode::kCustomVoice, hidden, i + 10);
    other.text = texts()[(i + 1) % texts().size()];
    const Outcome want_other = whole_text_alone(dir, request(Mode::kCustomVoice, hidden, i + 10), other.text);

    Codes got, got_other;
    std::atomic<int64_t> frames{0};
    auto h = synth.submit_text(r, collect(got, &frames), o);
    ASSERT_TRUE(h.ok()) << h.error().to_string();
    auto whole = synth.submit(other, collect(got_other, nullptr), o);
    ASSERT_TRUE(whole.ok()) << whole.error().to_string();
    int64_t frames_at_finish = 0;
    std::thread writer([&, handle = *h] {
      std::mt19937 rng(i + 1);
      for (size_t at = 0; at < text.size();) {
        const size_t n = std::min(text.size() - at, 1 + rng() % 4);
        EXPECT_TRUE(handle->append_text(std::string_view(text).substr(at, n)).ok());
        at += n;
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3 ? 500 : 20000));
      }
      frames_at_finish = frames.load();
      EXPECT_TRUE(handle->finish_text().ok());
    });
    auto st = (*h)->wait();
    writer.join();
    ASSERT_TRUE(st.ok()) << st.error().to_string();
    ASSERT_TRUE((*whole)->wait().ok());
    EXPECT_EQ(got, want.codes);
    EXPECT_EQ(got_other, want_other.codes);
    EXPECT_GT(frames_at_finish, 0) << "no frame came while the text was being written";
  }
}

// The frame core's parking, on one pool: stream B's text stops after 3 rows; it waits `wait`
// frames in its slot while stream A runs, then the rest of its rows come. With parking its codes
// are those it makes with all its rows from the start; run anyway (the planted bug: a waiting slot
// advanced, its frames dropped) they differ. A's codes never depend on B's fate.
struct PoolRun {
  Codes a, b;
};

// With `pages` the pool's backbone caches are paged, each slot holding just the reservation of its
// prompt and frames (a slot counted as advancing while parked outgrows it when `wait` is long).
PoolRun pool_run(const std::shared_ptr<const q3::gpu::DeviceModel>& dev, const q3::Prompt& prompt, bool b_in_pieces,
                 bool park, bool split, int wait = 5, std::shared_ptr<nn::gpu::KvPagePool> pages = nullptr) {
  constexpr int kFrames = 24;
  const int kWait = wait;
  q3::GenerationSettings ga, gb;
  for (auto* g : {&ga, &gb}) {
    g->talker = {false, 0.9f, 50, 1.0f, 1.2f};
    g->code_predictor = {false, 0.9f, 50, 1.0f, 1.0f};
    g->max_frames = kFrames;
    g->min_frames = kFrames;  // no EOS: every frame is compared
  }
  ga.seed = 7;
  gb.seed = 8;
  q3::Prompt pb = prompt;
  if (b_in_pieces) {
    pb.trailing.resize(static_cast<size_t>(3 * prompt.hidden));
    pb.trailing_rows = 3;
  }
  PoolRun run;
  auto fb = q3::gpu::FrameBatch::create_pool(dev, 4, 256, pages);
  EXPECT_TRUE(fb.ok()) << fb.error().to_string();
  if (!fb.ok()) return run;
  q3::gpu::FrameBatch& f = **fb;
  f.set_split_frames(split);
  f.set_active_slots(2);
  const int slots[2] = {0, 1};
  if (pages) {
    // A (slot 0) runs through B's wait; B's reservation is just its prompt and frames.
    for (const int slot : slots) {
      const int64_t need =
          q3::gpu::FrameBatch::kv_pages_for_stream(prompt.prefill_rows + kFrames + (slot == 0 ? kWait + 2 : 0), 1);
      auto reserved = pages->reserve(need);
      EXPECT_TRUE(reserved.ok() && *reserved);
      const Status held = f.hold_pages(slot, need);
      EXPECT_TRUE(held.ok()) << held.error().to_string();
    }
  }
  const q3::gpu::StreamSetup setups[2] = {{&prompt, ga}, {&pb, gb}};
  Status st = f.admit(slots, setups);
  EXPECT_TRUE(st.ok()) << st.error().to_string();
  int waited = 0;
  while (st.ok() && (run.a.size() < kFrames || run.b.size() < kFrames)) {
    const bool b_waits = b_in_pieces && run.b.size() == 3 && waited < kWait;
    if (b_in_pieces && run.b.size() == 3 && waited == kWait) {
      const q3::gpu::FrameBatch::TextAppend rest{1, prompt.trailing.data() + 3 * prompt.hidden, prompt.trailing_rows - 3};
      st = f.append_text({&rest, 1});
      EXPECT_TRUE(st.ok()) << st.error().to_string();
      ++waited;  // appended once
    }
    std::vector<int> parked;
    if (b_waits && park) parked.push_back(1);
    st = f.set_parked_slots(parked);
    if (st.ok()) st = f.run_frame(true);
    EXPECT_TRUE(st.ok()) << st.error().to_string();
    if (!st.ok()) break;
    const auto codes = [&](int s) { return std::vector<int32_t>(f.frame_codes(s), f.frame_codes(s) + 16); };
    if (run.a.size() < kFrames) run.a.push_back(codes(0));
    if (b_waits) ++waited;
    else if (run.b.size() < kFrames) run.b.push_back(codes(1));
  }
  return run;
}

TEST(GpuTextInput, AParkedSlotComesOutAsItWentIn) {
  REQUIRE_GPU();
  const std::string dir = "models/tiny_custom_voice";
  auto dev = q3::gpu::upload_model(test::tiny_model(dir));
  ASSERT_TRUE(dev.ok()) << dev.error().to_string();
  q3::PromptInputs in;
  in.text_ids = test::prompt_ids().text;
  in.speaker = "ryan";
  in.language = "english";
  in.layout = q3::TextLayout::kStreaming;
  auto prompt = q3::build_prompt(*test::tiny_model(dir), in);
  ASSERT_TRUE(prompt.ok()) << prompt.error().to_string();
  ASSERT_GT(prompt->trailing_rows, 8);
  for (const bool split : {false, true}) {
    SCOPED_TRACE(split ? "two graphs per frame" : "one graph per frame");
    const PoolRun want = pool_run(*dev, *prompt, false, false, split);
    const PoolRun parked = pool_run(*dev, *prompt, true, true, split);
    const PoolRun planted = pool_run(*dev, *prompt, true, false, split);
    ASSERT_EQ(want.b.size(), 24u);
    EXPECT_EQ(parked.a, want.a);
    EXPECT_EQ(parked.b, want.b);
    EXPECT_EQ(planted.a, want.a);   // the other slot is untouched either way
    EXPECT_NE(planted.b, want.b);   // a waiting slot that runs anyway is caught
    EXPECT_NE(want.a, want.b);      // not a comparison of constants
  }
}

// Parking with paged backbone caches: the parked frames' rows land in pages of the slot's own
// reservation, the codes are the contiguous pool's, and every page comes back with the pool. The
// wait is longer than a page, so a parked slot counted as advancing would outgrow its reservation.
TEST(GpuTextInput, AParkedSlotWithPagedCachesTakesNoPagesOfItsOwn) {
  REQUIRE_GPU();
  const std::string dir = "models/tiny_custom_voice";
  auto dev = q3::gpu::upload_model(test::tiny_model(dir));
  ASSERT_TRUE(dev.ok()) << dev.error().to_string();
  q3::PromptInputs in;
  in.text_ids = test::prompt_ids().text;
  in.speaker = "ryan";
  in.language = "english";
  in.layout = q3::TextLayout::kStreaming;
  auto prompt = q3::build_prompt(*test::tiny_model(dir), in);
  ASSERT_TRUE(prompt.ok()) << prompt.error().to_string();
  const nn::Qwen3Dims& d = (*dev)->talker().dims();
  constexpr int kLongWait = 2 * static_cast<int>(nn::kKvPagePositions);
  for (const bool split : {false, true}) {
    SCOPED_TRACE(split ? "two graphs per frame" : "one graph per frame");
    auto pages = nn::gpu::KvPagePool::create(d.layers, (*dev)->talker().kv_width());
    ASSERT_TRUE(pages.ok()) << pages.error().to_string();
    const PoolRun want = pool_run(*dev, *prompt, true, true, split, kLongWait);
    const PoolRun paged = pool_run(*dev, *prompt, true, true, split, kLongWait, *pages);
    ASSERT_EQ(want.b.size(), 24u);
    EXPECT_EQ(paged.a, want.a);
    EXPECT_EQ(paged.b, want.b);
    EXPECT_NE(want.a, want.b);  // not a comparison of constants
    const nn::KvPageStats ps = (*pages)->stats();
    EXPECT_GT(ps.total, 0);
    EXPECT_EQ(ps.free, ps.total) << "pages held after the pool is gone";
    EXPECT_EQ(ps.promised, 0);
  }
}

// Parking and frames launched ahead exclude each other: the core refuses rather than run a parked
// slot's frame it could not undo.
TEST(GpuTextInput, AParkedSlotInAFrameLaunchedAheadIsRefused) {
  REQUIRE_GPU();
  const std::string dir = "models/tiny_custom_voice";
  auto dev = q3::gpu::upload_model(test::tiny_model(dir));
  ASSERT_TRUE(dev.ok());
  q3::PromptInputs in;
  in.text_ids = test::prompt_ids().text;
  in.speaker = "ryan";
  in.language = "english";
  in.layout = q3::TextLayout::kStreaming;
  auto prompt = q3::build_prompt(*test::tiny_model(dir), in);
  ASSERT_TRUE(prompt.ok());
  auto fb = q3::gpu::FrameBatch::create_pool(*dev, 2, 256);
  ASSERT_TRUE(fb.ok());
  (*fb)->set_active_slots(2);
  q3::GenerationSettings g;
  g.max_frames = 10;
  const int slots[2] = {0, 1};
  const q3::gpu::StreamSetup setups[2] = {{&*prompt, g}, {&*prompt, g}};
  ASSERT_TRUE((*fb)->admit(slots, setups).ok());
  const int parked[1] = {1};
  ASSERT_TRUE((*fb)->set_parked_slots(parked).ok());
  const Status st = (*fb)->run_frame(true, true);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ErrorCode::kInternal);
}

}  // namespace
}  // namespace chorus::gpu_test
