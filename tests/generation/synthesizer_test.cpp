// The Synthesizer (engine/synthesizer.h), the one text → audio path of every front end: its codes
// are the official goldens, its audio is the codec's decode of those codes, a request gives the same
// codes and audio whether it runs alone or joins others at any frame, and cancel, refusal, bad
// requests and a failing receiver each end only their own request.
#include <gtest/gtest.h>

#include <malloc.h>

#include <chrono>
#include <fstream>
#include <map>
#include <limits>
#include <random>
#include <set>
#include <thread>

#include "engine/model.h"
#include "engine/synthesizer.h"
#include "golden_cases.h"
#include "models/codec/codec_folder.h"
#include "support/test_support.h"

namespace chorus::test {
namespace {

using engine::SynthesisRequest;

std::shared_ptr<const engine::Model> load_model(const std::string& rel) {
  auto m = engine::load(reference_path("qwen3_tts/" + rel), {});
  EXPECT_TRUE(m.ok()) << m.error().to_string();
  return m.ok() ? *m : nullptr;
}

// A sampled request (the checkpoint's sampler) whose codes depend on its seed.
SynthesisRequest sampled_request(uint64_t seed, int64_t frames) {
  SynthesisRequest r = golden_request(*gen_cases()[0], false);
  r.sampler = {};
  r.depth_sampler = {};
  r.sampler.greedy = false;
  r.depth_sampler.greedy = false;
  r.seed = seed;
  r.max_frames = frames;
  r.min_frames = frames;
  return r;
}

struct Collected {
  std::vector<int32_t> codes;
  std::vector<float> pcm;
  int64_t chunks = 0;
};

engine::ChunkCallback collect(Collected& c) {
  return [&c](const engine::AudioChunk& k) {
    c.codes.insert(c.codes.end(), k.codes, k.codes + k.frames * k.codebooks);
    c.pcm.insert(c.pcm.end(), k.samples, k.samples + k.count);
    ++c.chunks;
    return ok_status();
  };
}

// The request through the bare generator, one stream stepped alone: the path the Synthesizer must match.
std::vector<int32_t> solo_codes(const engine::Model& m, const SynthesisRequest& r) {
  auto s = m.generator().create_stream(r);
  EXPECT_TRUE(s.ok());
  if (!s.ok()) return {};
  engine::TtsStream* p = s->get();
  std::vector<engine::StepResult> out(1);
  std::vector<int32_t> codes;
  while (!p->finished()) {
    EXPECT_TRUE(m.generator().step({&p, 1}, out).ok());
    if (out[0].has_frame) codes.insert(codes.end(), out[0].codes.begin(), out[0].codes.end());
  }
  return codes;
}

// Every test runs with the codec's decode in line with the steps and overlapped with the next
// step on the decode thread (SynthesizerOptions::codec_overlap; the CPU codec takes the overlap
// only when asked, kOn).
class Synthesizer : public ::testing::TestWithParam<engine::SynthesizerOptions::CodecOverlap> {
 protected:
  engine::SynthesizerOptions options() const {
    engine::SynthesizerOptions o;
    o.codec_overlap = GetParam();
    return o;
  }
};

INSTANTIATE_TEST_SUITE_P(Decode, Synthesizer,
                         ::testing::Values(engine::SynthesizerOptions::CodecOverlap::kOff,
                                           engine::SynthesizerOptions::CodecOverlap::kOn),
                         [](const ::testing::TestParamInfo<engine::SynthesizerOptions::CodecOverlap>& i) {
                           return std::string(i.param == engine::SynthesizerOptions::CodecOverlap::kOn ? "overlapped"
                                                                                                   : "in_line");
                         });

TEST_P(Synthesizer, GoldenCodesAndTheirAudio) {
  std::map<std::string, std::shared_ptr<const engine::Model>> models;
  int cases = 0;
  for (const auto& c : gen_cases()) {
    SCOPED_TRACE(c->id);
    auto& m = models[c->model_dir];
    if (!m) m = load_model(c->model_dir);
    ASSERT_TRUE(m);
    engine::Synthesizer synth(m, options());
    EXPECT_EQ(synth.overlaps_codec(), GetParam() == engine::SynthesizerOptions::CodecOverlap::kOn);
    Collected got;
    const SynthesisRequest r = golden_request(*c, false);
    auto stats = synth.synthesize(r, collect(got));
    ASSERT_TRUE(stats.ok()) << stats.error().to_string();
    const auto want = c->golden.i32("codes");
    ASSERT_FALSE(want.empty());
    EXPECT_EQ(got.codes, want);
    EXPECT_EQ(stats->frames * m->info().codebooks, static_cast<int64_t>(want.size()));
    EXPECT_EQ(stats->stop, engine::StopReason::kMaxFrames);
    // Audio: the codec's one-pass decode of the reference frames (context) and the codes, minus the
    // reference's share, as the official output is cut.
    auto codec = codec::load_codec(reference_path("qwen3_tts/" + c->model_dir));
    ASSERT_TRUE(codec.ok());
    std::vector<int32_t> all;
    if (!r.xvector_only)
      for (const auto& f : r.ref_codes) all.insert(all.end(), f.begin(), f.end());
    const size_t ref_frames = all.size() / static_cast<size_t>(m->info().codebooks);
    all.insert(all.end(), want.begin(), want.end());
    auto pcm = codec->decoder.decode_all(all.data(), static_cast<int64_t>(all.size()) / m->info().codebooks);
    ASSERT_TRUE(pcm.ok());
    const size_t skip = ref_frames * static_cast<size_t>(codec->decoder.samples_per_frame());
    ASSERT_EQ(got.pcm.size() + skip, pcm->size());
    EXPECT_TRUE(std::equal(got.pcm.begin(), got.pcm.end(), pcm->begin() + static_cast<ptrdiff_t>(skip)))
        << "streamed audio differs from the one-pass decode";
    EXPECT_GT(stats->first_audio_s, 0.0);
    ++cases;
  }
  EXPECT_EQ(cases, 9);
}

// Requests submitted at random moments join the running ones at random frames and leave when they
// end; each one's codes must be those of its solo run, and different seeds must differ (else the
// comparison could not catch a wrong random stream).
TEST_P(Synthesizer, JoiningAtAnyFrameChangesNoRequest) {
  auto m = load_model("models/tiny_custom_voice");
  ASSERT_TRUE(m);
  engine::Synthesizer synth(m, options());
  std::mt19937 rng(7);
  constexpr int kRequests = 8;
  std::vector<SynthesisRequest> reqs;
  std::vector<Collected> got(kRequests);
  std::vector<std::shared_ptr<engine::Synthesis>> jobs;
  for (int i = 0; i < kRequests; ++i) {
    reqs.push_back(sampled_request(100 + i, 6 + static_cast<int64_t>(rng() % 20)));
    engine::SynthesisOptions o;
    o.audio = (i % 2) == 0;
    auto j = synth.submit(reqs.back(), collect(got[i]), o);
    ASSERT_TRUE(j.ok());
    jobs.push_back(*j);
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 15));
  }
  std::set<std::vector<int32_t>> distinct;
  for (int i = 0; i < kRequests; ++i) {
    auto s = jobs[i]->wait();
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(got[i].codes, solo_codes(*m, reqs[i])) << "request " << i;
    EXPECT_EQ(s->frames, reqs[i].max_frames);
    distinct.insert(got[i].codes);
  }
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kRequests));
  EXPECT_EQ(synth.load().running, 0);
  EXPECT_EQ(synth.load().queued, 0);
}

// The scheduler's account of its passes (SynthesizerOptions::on_step): every frame a request got
// was made in some pass, every request's end shows once, and the passes come in order.
TEST_P(Synthesizer, StepRecordsAccountForEveryFrameAndEnd) {
  auto m = load_model("models/tiny_custom_voice");
  ASSERT_TRUE(m);
  std::vector<engine::StepRecord> records;  // written on the scheduler thread, read once it is joined
  engine::SynthesizerOptions o = options();
  o.on_step = [&records](const engine::StepRecord& r) { records.push_back(r); };
  auto synth = std::make_unique<engine::Synthesizer>(m, o);
  std::vector<std::shared_ptr<engine::Synthesis>> jobs;
  int64_t frames = 0;
  for (int i = 0; i < 5; ++i) {
    auto j = synth->submit(sampled_request(300 + i, 5 + 3 * i), [](const engine::AudioChunk&) { return ok_status(); });
    ASSERT_TRUE(j.ok());
    jobs.push_back(*j);
    frames += 5 + 3 * i;
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * i));
  }
  for (auto& j : jobs) ASSERT_TRUE(j->wait().ok());
  synth.reset();
  ASSERT_FALSE(records.empty());
  int64_t made = 0, ended = 0;
  for (size_t k = 0; k < records.size(); ++k) {
    const engine::StepRecord& r = records[k];
    made += r.frames;
    EXPECT_LE(r.frames, r.streams);
    ended += r.ended;
    EXPECT_GE(r.seconds, r.generate_s);
    if (k > 0) {
      EXPECT_GT(r.index, records[k - 1].index);
      EXPECT_GE(std::chrono::duration<double>(r.start - records[k - 1].start).count(), records[k - 1].seconds);
    }
  }
  EXPECT_EQ(made, frames);
  EXPECT_EQ(ended, 5);
}

TEST_P(Synthesizer, CancelStopsOnlyThatRequest) {
  auto m = load_model("models/tiny_custom_voice");
  ASSERT_TRUE(m);
  engine::Synthesizer synth(m, options());
  Collected a, b;
  std::shared_ptr<engine::Synthesis> ja;
  // Cancels itself from its own callback after 3 frames (the receiver hung up, say).
  auto cb = [&](const engine::AudioChunk& k) {
    a.codes.insert(a.codes.end(), k.codes, k.codes + k.frames * k.codebooks);
    if (k.first_frame + k.frames == 3) ja->cancel();
    return ok_status();
  };
  const SynthesisRequest ra = sampled_request(1, 200), rb = sampled_request(2, 30);
  auto sa = synth.submit(ra, cb);
  ASSERT_TRUE(sa.ok());
  ja = *sa;
  auto sb = synth.submit(rb, collect(b));
  ASSERT_TRUE(sb.ok());
  auto stats_a = ja->wait();
  ASSERT_TRUE(stats_a.ok());
  EXPECT_EQ(stats_a->stop, engine::StopReason::kCancelled);
  EXPECT_LE(stats_a->frames, 4);  // stops within one step
  EXPECT_GE(stats_a->frames, 3);
  auto stats_b = (*sb)->wait();
  ASSERT_TRUE(stats_b.ok());
  EXPECT_EQ(stats_b->stop, engine::StopReason::kMaxFrames);
  EXPECT_EQ(b.codes, solo_codes(*m, rb));
  EXPECT_EQ(synth.load().running, 0);
}

// Resident memory of this process, from /proc (0 where there is none).
// The bytes malloc has handed out and not had back, over every arena. Resident memory is no measure
// here: it moves by several MiB between waves as the allocator trims and refills its pools, which
// hides a leak of a few hundred bytes per request; the live heap moves by a few KiB in total.
double live_heap_mib() {
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<double>(mi.uordblks + mi.hblkhd) / (1024.0 * 1024.0);
}

// 10,000 requests ended early every way a client ends one: cancelled while queued, cancelled from
// its callback after a few frames, or a receiver that fails. Afterwards nothing runs or waits, and
// the live heap after the last 8,000 is that after the first 2,000 (streams, codec states and jobs
// are freed; a leak of 32 bytes per request would show as 0.25 MiB).
TEST_P(Synthesizer, TenThousandCancelsLeaveNothingBehind) {
  auto m = load_model("models/tiny_custom_voice");
  ASSERT_TRUE(m);
  engine::SynthesizerOptions o = options();
  o.max_running = 64;
  engine::Synthesizer synth(m, o);
  std::mt19937 rng(7);
  const auto wave = [&](int n) {
    std::vector<std::shared_ptr<engine::Synthesis>> jobs;
    for (int i = 0; i < n; ++i) {
      const int how = static_cast<int>(rng() % 3), after = 1 + static_cast<int>(rng() % 4);
      auto self = std::make_shared<std::shared_ptr<engine::Synthesis>>();
      auto s = synth.submit(sampled_request(rng(), 400), [self, how, after](const engine::AudioChunk& k) -> Status {
        if (k.first_frame + k.frames < after) return ok_status();
        if (how == 2) return make_error(ErrorCode::kCancelled, "the receiver went away");
        if (*self) (*self)->cancel();
        return ok_status();
      });
      ASSERT_TRUE(s.ok()) << s.error().to_string();
      *self = *s;
      if (how == 0) (*s)->cancel();  // possibly still queued
      jobs.push_back(*s);
    }
    for (auto& j : jobs) {
      auto st = j->wait();
      if (st.ok()) {
        EXPECT_EQ(st->stop, engine::StopReason::kCancelled);
        EXPECT_LE(st->frames, 6);
      }
    }
  };
  // The allocator settles over the first 2,000 (thread caches, pools): the baseline is taken there.
  wave(1000);
  wave(1000);
  const double warm = live_heap_mib();
  for (int w = 0; w < 8; ++w) wave(1000);
  const double after = live_heap_mib();
  const auto load = synth.load();
  EXPECT_EQ(load.running, 0);
  EXPECT_EQ(load.queued, 0);
  EXPECT_EQ(load.queued_audio_s, 0);
  EXPECT_GT(warm, 0);
  EXPECT_LT(after - warm, 0.25) << "the live heap grew from " << warm << " to " << after << " MiB";
  std::printf("[cancels] 10,000 requests ended early: live heap %.3f MiB after 2,000, %.3f MiB after 10,000\n", warm,
              after);
}

TEST_P(Synthesizer, AFailingReceiverEndsOnlyItsRequest) {
  auto m = load_model("models/tiny_custom_voice");
  ASSERT_TRUE(m);
  engine::Synthesizer synth(m, options());
  auto failing = [](const engine::AudioChunk& k) {
    return k.first_frame == 2 ? make_error(ErrorCode::kIo, "client went away") : ok_status();
  };
  Collected b;
  const SynthesisRequest rb = sampled_request(5, 12);
  auto ja = synth.submit(sampled_request(4, 50), failing);
  auto jb = synth.submit(rb, collect(b));
  ASSERT_TRUE(ja.ok() && jb.ok());
  auto sa = (*ja)->wait();
  ASSERT_FALSE(sa.ok());
  EXPECT_EQ(sa.error().code, ErrorCode::kIo);
  ASSERT_TRUE((*jb)->wait().ok());
  EXPECT_EQ(b.codes, solo_codes(*m, rb));
}

TEST_P(Synthesizer, BadRequestsFailAtSubmission) {
  auto m = load_model("models/tiny_custom_voice");
  ASSERT_TRUE(m);
  engine::Synthesizer synth(m, options());
  SynthesisRequest none;  // no text at all
  auto r1 = synth.submit(none, nullptr);
  ASSERT_FALSE(r1.ok());
  EXPECT_EQ(r1.error().code, ErrorCode::kInvalidArgument);
  SynthesisRequest nan = sampled_request(1, 5);
  nan.sampler.temperature = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(synth.submit(nan, nullptr).ok());
  SynthesisRequest speaker = sampled_request(1, 5);
  speaker.speaker = "nobody";
  auto r3 = synth.submit(speaker, nullptr);
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.error().message.find("nobody"), std::string::npos) << r3.error().message;
  EXPECT_EQ(synth.load().queued + synth.load().running, 0);
}

TEST_P(Synthesizer, AFullQueueRefusesAtOnce) {
  auto m = load_model("models/tiny_custom_voice");
  ASSERT_TRUE(m);
  engine::SynthesizerOptions o = options();
  o.max_running = 1;
  o.max_queued = 2;
  engine::Synthesizer synth(m, o);
  std::vector<std::shared_ptr<engine::Synthesis>> jobs;
  int refused = 0;
  for (int i = 0; i < 8; ++i) {
    auto j = synth.submit(sampled_request(i, 300), nullptr);
    if (j.ok()) {
      jobs.push_back(*j);
    } else {
      EXPECT_EQ(j.error().code, ErrorCode::kResourceExhausted);
      ++refused;
    }
  }
  EXPECT_GE(refused, 5);  // one running, two waiting
  for (auto& j : jobs) j->cancel();
  for (auto& j : jobs) {
    auto s = j->wait();
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->stop, engine::StopReason::kCancelled);
  }
}

TEST_P(Synthesizer, DeadlinesEndRequestsWithAReason) {
  auto m = load_model("models/tiny_custom_voice");
  ASSERT_TRUE(m);
  engine::SynthesizerOptions so = options();
  so.max_running = 1;
  engine::Synthesizer synth(m, so);
  // The only place is held by a long request that a slow receiver paces; the next one waits
  // past its first-audio deadline.
  auto slow = [](const engine::AudioChunk&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return ok_status();
  };
  auto busy = synth.submit(sampled_request(1, 100), slow);
  ASSERT_TRUE(busy.ok());
  engine::SynthesisOptions o;
  o.first_audio_deadline_s = 0.05;
  auto late = synth.submit(sampled_request(2, 10), nullptr, o);
  ASSERT_TRUE(late.ok());
  auto r = (*late)->wait();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, ErrorCode::kResourceExhausted);
  EXPECT_NE(r.error().message.find("deadline"), std::string::npos) << r.error().message;
  (*busy)->cancel();
  ASSERT_TRUE((*busy)->wait().ok());
  // A running request stopped at its total deadline keeps what it delivered.
  engine::SynthesisOptions t;
  t.total_deadline_s = 0.1;
  Collected got;
  auto capped = synth.submit(sampled_request(3, 150), [&](const engine::AudioChunk& k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return collect(got)(k);
  }, t);
  ASSERT_TRUE(capped.ok());
  auto rc = (*capped)->wait();
  ASSERT_FALSE(rc.ok());
  EXPECT_NE(rc.error().message.find("total deadline"), std::string::npos) << rc.error().message;
  EXPECT_GT(got.codes.size(), 0u);
  EXPECT_EQ(synth.load().running, 0);
}

TEST_P(Synthesizer, QueuedAudioIsBounded) {
  auto m = load_model("models/tiny_custom_voice");
  ASSERT_TRUE(m);
  engine::SynthesizerOptions so = options();
  so.max_running = 1;
  so.max_queued_audio_s = 3.0;  // 37.5 frames at the requests' limits
  engine::Synthesizer synth(m, so);
  std::vector<std::shared_ptr<engine::Synthesis>> jobs;
  int refused = 0;
  for (int i = 0; i < 6; ++i) {
    auto j = synth.submit(sampled_request(i, 20), nullptr);  // 1.6 s each
    if (j.ok()) jobs.push_back(*j);
    else ++refused;
  }
  EXPECT_GE(refused, 3);
  EXPECT_LE(synth.load().queued_audio_s, 3.0);
  EXPECT_GE(synth.retry_after_s(), 1.0);
  for (auto& j : jobs) EXPECT_TRUE(j->wait().ok());
}

}  // namespace
}  // namespace chorus::test
