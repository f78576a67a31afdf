#include "bench_serve.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "command.h"
#include "engine/model.h"
#include "engine/synthesizer.h"
#include "runtime/cpu/quant.h"

namespace chorus::cli {

namespace {

using Clock = std::chrono::steady_clock;
double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void ServeBenchAddOptions(ServeBenchOptions& o, CLI::App& app) {
  app.add_flag("--serve", o.serve, "Open-loop serving load (Poisson arrivals) through the Synthesizer");
  app.add_option("--rate", o.rate, "--serve: requests per second")->capture_default_str();
  app.add_option("--duration", o.duration, "--serve: seconds of arrivals")->capture_default_str();
  app.add_option("--lengths", o.lengths, "--serve: utterance seconds, A-B (uniform) or a file of seconds per line")
      ->capture_default_str();
  app.add_option("--max-streams", o.max_streams, "--serve: requests running together at most")->capture_default_str();
  app.add_option("--codec-threads", o.codec_threads,
                 "--serve: threads decoding the requests' frames at once when the codec is on the GPU")
      ->capture_default_str();
  app.add_option("--max-queue", o.max_queue, "--serve: waiting requests at most (more are refused)")->capture_default_str();
  app.add_option("--ttfa-bound", o.ttfa_bound, "--serve --sweep: p99 time to first audio allowed, seconds")
      ->capture_default_str();
  app.add_flag("--sweep", o.sweep, "--serve: find the highest rate with no underrun and p99 TTFA within the bound");
  app.add_option("--verify", o.verify, "--serve: replay N requests alone and check their codes are identical")
      ->capture_default_str();
  app.add_option("--json", o.json, "--serve: also write the results as JSON to this file");
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

Result<std::vector<double>> read_lengths(const std::string& spec) {
  double a = 0, b = 0;
  char tail = 0;
  if (std::sscanf(spec.c_str(), "%lf-%lf%c", &a, &b, &tail) == 2) {
    if (!(a > 0 && b >= a && b < 3600)) return make_error(ErrorCode::kInvalidArgument, "--lengths: need 0 < A <= B < 3600");
    return std::vector<double>{a, b};
  }
  std::ifstream f(spec);
  if (!f) return make_error(ErrorCode::kNotFound, "--lengths: " + spec + ": neither A-B nor a readable file");
  std::vector<double> v;
  for (double x; f >> x;) {
    if (!(x > 0 && x < 3600)) return make_error(ErrorCode::kInvalidArgument, "--lengths: " + spec + ": a length outside (0, 3600) s");
    v.push_back(x);
  }
  if (v.empty()) return make_error(ErrorCode::kInvalidArgument, "--lengths: " + spec + ": no lengths");
  return v;
}

// One request as the simulated client saw it.
struct Trace {
  engine::SynthesisRequest request;
  Clock::time_point submitted;
  std::vector<double> chunk_at;  // seconds after submission, one per frame
  std::vector<int32_t> codes;
  std::shared_ptr<engine::Synthesis> job;
  bool refused = false;
  bool failed = false;
  double first_audio_s = 0;
};

struct Point {
  double rate = 0, duration = 0, audio_s_per_s = 0, mean_streams = 0, ttfa_p50 = 0, ttfa_p90 = 0, ttfa_p99 = 0;
  double gap_p99_ms = 0, underrun_pct = 0, late_frames_pct = 0, rss_mib = 0;
  double step_ms = 0, generate_ms = 0, decode_ms = 0;  // the scheduler's mean step and its parts
  int max_streams = 0;
  int64_t requests = 0, refused = 0, failed = 0, verified = 0, verify_mismatches = 0;
};

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::min<double>(static_cast<double>(v.size() - 1), std::ceil(p / 100.0 * static_cast<double>(v.size())) - 1));
  return v[std::max<size_t>(0, i)];
}

// The texts: a paragraph cut to about the length of the utterance (the frame count is set exactly;
// the text only has to be long enough for the prompt to be realistic).
std::string text_for(double seconds, std::mt19937_64& rng) {
  static const char* kWords[] = {"the", "morning", "light", "fell", "across", "quiet", "streets", "while", "people",
                                 "walked", "to", "work", "talking", "about", "plans", "for", "a", "long", "weekend",
                                 "by", "sea", "and", "how", "summer", "had", "gone", "so", "quickly", "this", "year"};
  const int words = std::max(3, static_cast<int>(seconds * 2.5));
  std::string t;
  for (int i = 0; i < words; ++i) {
    if (i) t += ' ';
    t += kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))];
  }
  return t + ".";
}

Result<Point> run_point(engine::Synthesizer& synth, const ServeBenchOptions& o, double rate,
                        const std::vector<double>& lengths, uint64_t seed, bool print) {
  const engine::ModelInfo& info = synth.model().info();
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<std::unique_ptr<Trace>> traces;
  std::atomic<bool> sampling{true};
  std::vector<int> running_samples;
  std::thread sampler([&] {
    while (sampling.load()) {
      running_samples.push_back(synth.load().running);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  const engine::Synthesizer::Counters c0 = synth.counters();
  const Clock::time_point t0 = Clock::now();
  double at = gap(rng);
  int64_t n = 0;
  while (at < o.duration) {
    const double len = lengths.size() == 2 && lengths[0] <= lengths[1] && lengths.size() == 2
                           ? std::uniform_real_distribution<double>(lengths[0], lengths[1])(rng)
                           : lengths[rng() % lengths.size()];
    auto t = std::make_unique<Trace>();
    engine::SynthesisRequest& r = t->request;
    r.text = text_for(len, rng);
    if (!info.speakers.empty()) r.speaker = info.speakers[rng() % info.speakers.size()];
    r.max_frames = r.min_frames = std::max<int64_t>(1, std::llround(len * info.frame_rate));
    r.length_cap.frames_per_token = 0;
    r.seed = seed * 1000003 + static_cast<uint64_t>(n++);
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at)));
    Trace* tp = t.get();
    tp->submitted = Clock::now();
    auto job = synth.submit(r, [tp](const engine::AudioChunk& c) {
      if (c.frames > 0) {
        tp->chunk_at.push_back(secs(Clock::now() - tp->submitted));
        tp->codes.insert(tp->codes.end(), c.codes, c.codes + c.frames * c.codebooks);
      }
      return ok_status();
    });
    if (job.ok()) tp->job = *job;
    else if (job.error().code == ErrorCode::kResourceExhausted) tp->refused = true;
    else return job.error();
    traces.push_back(std::move(t));
    at += gap(rng);
  }
  for (auto& t : traces)
    if (t->job) {
      auto s = t->job->wait();
      if (s.ok()) t->first_audio_s = s->first_audio_s;
      else t->failed = true;
    }
  const double wall = secs(Clock::now() - t0);
  const engine::Synthesizer::Counters c1 = synth.counters();
  sampling = false;
  sampler.join();

  Point p;
  p.rate = rate;
  p.duration = o.duration;
  std::vector<double> ttfa, gaps;
  int64_t frames = 0, late = 0, underrun_reqs = 0;
  const double frame_s = 1.0 / info.frame_rate;
  for (auto& t : traces) {
    ++p.requests;
    if (t->refused) { ++p.refused; continue; }
    if (t->failed) { ++p.failed; continue; }
    ttfa.push_back(t->first_audio_s);
    bool under = false;
    // Playback starts when frame 0 arrives; frame k plays at start + k frames.
    for (size_t k = 0; k < t->chunk_at.size(); ++k) {
      if (k > 0) gaps.push_back((t->chunk_at[k] - t->chunk_at[k - 1]) * 1e3);
      if (t->chunk_at[k] > t->chunk_at[0] + static_cast<double>(k) * frame_s) {
        ++late;
        under = true;
      }
    }
    frames += static_cast<int64_t>(t->chunk_at.size());
    underrun_reqs += under;
  }
  const int64_t served = p.requests - p.refused - p.failed;
  p.audio_s_per_s = static_cast<double>(frames) * frame_s / wall;
  double sum = 0;
  for (int x : running_samples) {
    sum += x;
    p.max_streams = std::max(p.max_streams, x);
  }
  p.mean_streams = running_samples.empty() ? 0 : sum / static_cast<double>(running_samples.size());
  p.ttfa_p50 = pct(ttfa, 50);
  p.ttfa_p90 = pct(ttfa, 90);
  p.ttfa_p99 = pct(ttfa, 99);
  p.gap_p99_ms = pct(gaps, 99);
  p.underrun_pct = served > 0 ? 100.0 * static_cast<double>(underrun_reqs) / static_cast<double>(served) : 0;
  p.late_frames_pct = frames > 0 ? 100.0 * static_cast<double>(late) / static_cast<double>(frames) : 0;
  p.rss_mib = peak_rss_mib();
  if (const int64_t steps = c1.steps - c0.steps; steps > 0) {
    p.generate_ms = (c1.generate_s - c0.generate_s) * 1e3 / static_cast<double>(steps);
    p.decode_ms = (c1.decode_s - c0.decode_s) * 1e3 / static_cast<double>(steps);
    p.step_ms = wall * 1e3 / static_cast<double>(steps);
  }

  // Solo replays: the same request alone must give the same codes.
  std::mt19937_64 pick(seed ^ 0x5eed);
  for (int64_t v = 0; v < o.verify && served > 0; ++v) {
    Trace* t = nullptr;
    for (int tries = 0; tries < 100 && !t; ++tries) {
      Trace* c = traces[pick() % traces.size()].get();
      if (c->job && !c->failed) t = c;
    }
    if (!t) break;
    std::vector<int32_t> solo;
    engine::SynthesisOptions so;
    so.audio = false;
    auto s = synth.synthesize(t->request, [&](const engine::AudioChunk& c) {
      solo.insert(solo.end(), c.codes, c.codes + c.frames * c.codebooks);
      return ok_status();
    }, so);
    if (!s.ok()) return s.error();
    ++p.verified;
    if (solo != t->codes) ++p.verify_mismatches;
  }
  if (print)
    std::printf("rate %.2f/s: %lld requests (%lld refused, %lld failed), %.1f audio-s/s, streams mean %.1f max %d, "
                "TTFA p50 %.0f / p90 %.0f / p99 %.0f ms, frame gap p99 %.1f ms, underruns %.1f %% of requests "
                "(%.2f %% of frames), peak RSS %.0f MiB%s\n",
                p.rate, (long long)p.requests, (long long)p.refused, (long long)p.failed, p.audio_s_per_s, p.mean_streams,
                p.max_streams, p.ttfa_p50 * 1e3, p.ttfa_p90 * 1e3, p.ttfa_p99 * 1e3, p.gap_p99_ms, p.underrun_pct,
                p.late_frames_pct, p.rss_mib,
                p.verified ? (", verified " + std::to_string(p.verified) + " solo: " +
                              std::to_string(p.verify_mismatches) + " mismatches").c_str()
                           : "");
  if (print)
    std::printf("  scheduler: a step every %.2f ms: generation %.2f ms, codec and delivery %.2f ms\n", p.step_ms,
                p.generate_ms, p.decode_ms);
  return p;
}

nlohmann::json to_json(const Point& p) {
  return {{"rate", p.rate}, {"duration_s", p.duration}, {"requests", p.requests}, {"refused", p.refused},
          {"failed", p.failed}, {"audio_s_per_s", p.audio_s_per_s}, {"streams_mean", p.mean_streams},
          {"streams_max", p.max_streams}, {"ttfa_p50_s", p.ttfa_p50}, {"ttfa_p90_s", p.ttfa_p90},
          {"ttfa_p99_s", p.ttfa_p99}, {"frame_gap_p99_ms", p.gap_p99_ms}, {"underrun_requests_pct", p.underrun_pct},
          {"late_frames_pct", p.late_frames_pct}, {"peak_rss_mib", p.rss_mib}, {"verified", p.verified},
          {"verify_mismatches", p.verify_mismatches}, {"step_ms", p.step_ms}, {"generate_ms", p.generate_ms},
          {"decode_ms", p.decode_ms}};
}

bool good(const Point& p, const ServeBenchOptions& o) {
  return p.refused == 0 && p.failed == 0 && p.underrun_pct == 0 && p.ttfa_p99 <= o.ttfa_bound;
}

}  // namespace

void ServeBenchOptions::add_to(CLI::App& app) { ServeBenchAddOptions(*this, app); }

int run_serve_bench(const ServeBenchOptions& o, const std::string& model, const std::string& device, int threads,
                    uint64_t seed, cpu::WeightFormat weights) {
  if (!(o.rate > 0) || !(o.duration > 0) || o.verify < 0) return fail("bench --serve: --rate and --duration must be > 0");
  auto lengths = read_lengths(o.lengths);
  if (!lengths.ok()) return fail(lengths.error());
  auto dev = engine::Device::parse(device);
  if (!dev.ok()) return fail(dev.error());
  std::unique_ptr<ThreadPool> own_pool;
  if (threads > 0) own_pool = std::make_unique<ThreadPool>(threads);
  engine::LoadOptions lo;
  lo.device = *dev;
  lo.pool = own_pool ? own_pool.get() : &ThreadPool::global();
  lo.weights = weights;
  auto m = engine::load(model, lo);
  if (!m.ok()) return fail(m.error());
  engine::SynthesizerOptions so;
  so.max_running = o.max_streams;
  so.max_queued = o.max_queue;
  so.codec_threads = o.codec_threads;
  engine::Synthesizer synth(*m, so);
  std::printf("model  %s (%s %s) on %s, %s weights; lengths %s s; max %d streams\n", model.c_str(),
              (*m)->info().family.c_str(), (*m)->info().variant.c_str(), dev->name().c_str(),
              cpu::weight_format_name(weights), o.lengths.c_str(), o.max_streams);
  nlohmann::json out = {{"model", model},
                        {"device", dev->name()},
                        {"weights", cpu::weight_format_name(weights)},
                        {"lengths", o.lengths},
                        {"points", nlohmann::json::array()}};
  if (!o.sweep) {
    auto p = run_point(synth, o, o.rate, *lengths, seed, true);
    if (!p.ok()) return fail(p.error());
    out["points"].push_back(to_json(*p));
  } else {
    // Double the rate until a point fails, then bisect between the last good and the first bad.
    double lo_rate = 0, hi_rate = 0, rate = o.rate;
    for (int i = 0; i < 12 && hi_rate == 0; ++i, rate *= 2) {
      auto p = run_point(synth, o, rate, *lengths, seed + static_cast<uint64_t>(i), true);
      if (!p.ok()) return fail(p.error());
      out["points"].push_back(to_json(*p));
      if (good(*p, o)) lo_rate = rate;
      else hi_rate = rate;
    }
    for (int i = 0; i < 4 && hi_rate > 0 && lo_rate > 0; ++i) {
      const double mid = 0.5 * (lo_rate + hi_rate);
      auto p = run_point(synth, o, mid, *lengths, seed + 100 + static_cast<uint64_t>(i), true);
      if (!p.ok()) return fail(p.error());
      out["points"].push_back(to_json(*p));
      (good(*p, o) ? lo_rate : hi_rate) = mid;
    }
    std::printf("sweep: highest rate with no underrun and p99 TTFA <= %.0f ms: %.3f requests/s\n", o.ttfa_bound * 1e3, lo_rate);
    out["sweep_rate"] = lo_rate;
  }
  if (!o.json.empty()) {
    std::ofstream f(o.json);
    f << out.dump(2) << "\n";
    if (!f) return fail(make_error(ErrorCode::kIo, o.json + ": cannot write"));
  }
  for (const auto& p : out["points"])
    if (p["verify_mismatches"].get<int64_t>() > 0) return fail("bench --serve: a replayed request's codes differ from its run under load");
  return 0;
}

}  // namespace chorus::cli
