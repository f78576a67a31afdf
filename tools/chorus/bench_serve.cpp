#include "bench_serve.h"

#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "bench_serve_load.h"
#include "command.h"
#include "engine/model.h"
#include "engine/synthesizer.h"
#include "runtime/cpu/quant.h"

namespace chorus::cli {

namespace {

using namespace serve_bench;

void ServeBenchAddOptions(ServeBenchOptions& o, CLI::App& app) {
  app.add_flag("--serve", o.serve, "Open-loop serving load (Poisson arrivals) through the Synthesizer, or a server with --url");
  app.add_option("--url", o.url, "--serve: drive a running chorus serve at this base URL (http://HOST:PORT) instead; "
                                 "--model is then the server's model name");
  app.add_option("--voice", o.voice, "--serve --url: the voice of every request (a preset name or a stored voice id)");
  app.add_option("--rate", o.rate, "--serve: requests per second")->capture_default_str();
  app.add_option("--duration", o.duration, "--serve: seconds of arrivals measured")->capture_default_str();
  app.add_option("--settle", o.settle,
                 "--serve: seconds of arrivals before the measured ones, at the same rate, that only load the "
                 "system, so the figures are the steady state's (the streams in progress grow for about the "
                 "longest utterance: 30 s for 5-30)")
      ->capture_default_str();
  app.add_option("--lengths", o.lengths, "--serve: utterance seconds, A-B (uniform) or a file of seconds per line")
      ->capture_default_str();
  app.add_option("--max-streams", o.max_streams, "--serve: requests running together at most")->capture_default_str();
  app.add_flag("--batch-invariant", o.batch_invariant,
               "--serve or --batches, CUDA: as chorus serve --batch-invariant (a stream's codes do not depend on "
               "its batch; slower)");
  app.add_option("--codec-overlap", o.codec_overlap,
                 "--serve: decode a step's frames while the next step generates: auto (when the codec runs on "
                 "the GPU), on, or off (the Synthesizer's default)")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--max-queue", o.max_queue, "--serve: waiting requests at most (more are refused)")->capture_default_str();
  app.add_option("--ttfa-bound", o.ttfa_bound, "--serve --sweep: p99 time to first audio allowed, seconds")
      ->capture_default_str();
  app.add_flag("--sweep", o.sweep, "--serve: find the highest rate with no underrun and p99 TTFA within the bound");
  app.add_option("--verify", o.verify,
                 "--serve: replay N requests alone and check their codes are identical (on CUDA guaranteed only "
                 "with --batch-invariant)")
      ->capture_default_str();
  app.add_option("--json", o.json, "--serve: also write the results as JSON to this file");
  app.add_option("--cfg-share", o.cfg_share,
                 "--serve with --cfg-scale: the share of requests guided, 0 to 1, spread evenly over the arrivals "
                 "(the rest plain, in the same batch)")
      ->capture_default_str();
  app.add_option("--steps", o.steps,
                 "--serve, in process: write every scheduler step to this CSV file (its time, duration, "
                 "generation, codec, streams, newcomers and their prompt rows, graph captures)");
}

// The scheduler's steps as they come (SynthesizerOptions::on_step, on its thread).
struct StepLog {
  std::mutex mu;
  std::vector<engine::StepRecord> steps;
  void add(const engine::StepRecord& r) {
    std::lock_guard<std::mutex> lock(mu);
    steps.push_back(r);
  }
  std::vector<engine::StepRecord> take() {
    std::lock_guard<std::mutex> lock(mu);
    return std::exchange(steps, {});
  }
};

// A point's steps, for --steps: its rate and start.
struct PointSteps {
  double rate = 0;
  Clock::time_point t0;
  std::vector<engine::StepRecord> steps;
};

Status write_steps(const std::string& path, const std::vector<PointSteps>& points) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return make_error(ErrorCode::kIo, "bench --serve: cannot write " + path);
  std::fprintf(f, "rate,index,start_s,ms,generate_ms,decode_ms,prefill_ms,streams,frames,ended,joined,prefill_rows,"
                  "graphs_captured,slots_computed,slots_moved,joined_ahead,release_ms\n");
  for (const PointSteps& p : points)
    for (const engine::StepRecord& r : p.steps)
      std::fprintf(f, "%g,%lld,%.6f,%.3f,%.3f,%.3f,%.3f,%d,%d,%d,%lld,%lld,%lld,%lld,%lld,%lld,%.3f\n", p.rate,
                   (long long)r.index,
                   secs(r.start - p.t0), r.seconds * 1e3, r.generate_s * 1e3, r.decode_s * 1e3,
                   r.stages.prefill_s * 1e3, r.streams, r.frames, r.ended, (long long)r.stages.joined,
                   (long long)r.stages.prefill_rows, (long long)r.stages.graphs_captured,
                   (long long)r.stages.slots_computed, (long long)r.stages.slots_moved,
                   (long long)r.stages.joined_ahead, r.release_s * 1e3);
  const bool ok = std::fclose(f) == 0;
  return ok ? ok_status() : make_error(ErrorCode::kIo, "bench --serve: cannot write " + path);
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

// One request as the simulated client saw it.
struct Trace {
  engine::SynthesisRequest request;
  Clock::time_point submitted;
  Timing timing;
  std::vector<int32_t> codes;
  std::shared_ptr<engine::Synthesis> job;
};

Result<Point> run_point(engine::Synthesizer& synth, StepLog& log, const ServeBenchOptions& o, double rate,
                        const std::vector<double>& lengths, uint64_t seed,
                        std::vector<PointSteps>& kept) {
  const engine::ModelInfo& info = synth.model().info();
  std::vector<Arrival> plan = plan_arrivals(rate, o.settle + o.duration, lengths, info.speakers, info.frame_rate, seed);
  const int64_t guided = guide_arrivals(plan, o.cfg_scale, o.cfg_share);
  std::vector<std::unique_ptr<Trace>> traces;
  std::atomic<bool> sampling{true};
  std::vector<Running> running_samples;
  const engine::Synthesizer::Counters c0 = synth.counters();
  (void)log.take();
  const Clock::time_point t0 = Clock::now();
  std::thread sampler([&] {
    while (sampling.load()) {
      running_samples.push_back({secs(Clock::now() - t0), synth.load().running});
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::optional<Error> first_error;
  for (const Arrival& a : plan) {
    auto t = std::make_unique<Trace>();
    engine::SynthesisRequest& r = t->request;
    r.text = a.text;
    r.speaker = a.speaker;
    r.max_frames = r.min_frames = a.frames;
    r.length_cap.frames_per_token = 0;
    r.seed = a.seed;
    if (a.cfg_scale != 1.0f) r.cfg_scale = a.cfg_scale;
    r.instruct = a.instruct;
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.at_s)));
    Trace* tp = t.get();
    tp->submitted = Clock::now();
    tp->timing.sent_s = secs(tp->submitted - t0);
    auto job = synth.submit(r, [tp](const engine::AudioChunk& c) {
      if (c.frames > 0) {
        tp->timing.frame_at.push_back(secs(Clock::now() - tp->submitted));
        tp->codes.insert(tp->codes.end(), c.codes, c.codes + c.frames * c.codebooks);
      }
      return ok_status();
    });
    // A request the Synthesizer refuses at submission counts as failed, and the run goes on: the
    // requests already running hold pointers to their traces until they end.
    if (job.ok()) {
      tp->job = *job;
    } else if (job.error().code == ErrorCode::kResourceExhausted) {
      tp->timing.refused = true;
    } else {
      tp->timing.failed = true;
      tp->timing.error = job.error().to_string();
      if (!first_error) first_error = job.error();
    }
    traces.push_back(std::move(t));
  }
  for (auto& t : traces)
    if (t->job) {
      auto s = t->job->wait();
      if (s.ok()) t->timing.first_audio_s = s->first_audio_s;
      else t->timing.failed = true;
    }
  const double wall = secs(Clock::now() - t0);
  const engine::Synthesizer::Counters c1 = synth.counters();
  std::vector<engine::StepRecord> steps = log.take();
  sampling = false;
  sampler.join();
  if (first_error) {
    int64_t at_submission = 0;
    for (auto& t : traces) at_submission += t->timing.failed && !t->job;
    std::fprintf(stderr, "bench --serve: %lld request(s) refused at submission, the first: %s\n",
                 static_cast<long long>(at_submission), first_error->to_string().c_str());
    if (at_submission == static_cast<int64_t>(traces.size())) return *first_error;
  }

  std::vector<const Timing*> timings;
  for (auto& t : traces) timings.push_back(&t->timing);
  Point p = summarize(timings, info.frame_rate, rate, o.duration, o.settle, wall, running_samples);
  p.guided = guided;
  p.rss_mib = peak_rss_mib();
  if (const int64_t steps = c1.steps - c0.steps; steps > 0) {
    p.generate_ms = (c1.generate_s - c0.generate_s) * 1e3 / static_cast<double>(steps);
    p.decode_ms = (c1.decode_s - c0.decode_s) * 1e3 / static_cast<double>(steps);
    p.release_ms = (c1.release_s - c0.release_s) * 1e3 / static_cast<double>(steps);
    p.step_ms = wall * 1e3 / static_cast<double>(steps);
  }
  std::vector<StepSample> samples;
  for (const engine::StepRecord& r : steps)
    samples.push_back({secs(r.start - t0), r.seconds, r.generate_s, r.decode_s, r.release_s, r.stages.joined > 0,
                       r.stages.graphs_captured > 0});
  summarize_steps(p, samples);
  if (!o.steps.empty()) kept.push_back({rate, t0, std::move(steps)});

  // Solo replays: the same request alone must give the same codes.
  const int64_t served = p.requests - p.refused - p.failed;
  std::mt19937_64 pick(seed ^ 0x5eed);
  for (int64_t v = 0; v < o.verify && served > 0; ++v) {
    Trace* t = nullptr;
    for (int tries = 0; tries < 100 && !t; ++tries) {
      Trace* c = traces[pick() % traces.size()].get();
      if (c->job && !c->timing.failed) t = c;
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
  return p;
}

}  // namespace

void ServeBenchOptions::add_to(CLI::App& app) { ServeBenchAddOptions(*this, app); }

int run_serve_bench(const ServeBenchOptions& o, const std::string& model, const std::string& device, int threads,
                    uint64_t seed, cpu::WeightFormat weights, codec::CodecPrecision codec_precision) {
  if (!(o.rate > 0) || !(o.duration > 0) || o.verify < 0) return fail("bench --serve: --rate and --duration must be > 0");
  if (const std::string e = guidance_problem(o); !e.empty()) return fail(e);
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
  lo.codec_precision = codec_precision;
  lo.first_pool_slots = o.max_streams;  // as chorus serve: one frame pool holds every running stream
  lo.batch_invariant = o.batch_invariant;
  auto m = engine::load(model, lo);
  if (!m.ok()) return fail(m.error());
  StepLog log;
  engine::SynthesizerOptions so;
  so.on_step = [&log](const engine::StepRecord& r) { log.add(r); };
  so.max_running = o.max_streams;
  so.max_queued = o.max_queue;
  so.codec_overlap = o.codec_overlap == "on"    ? engine::SynthesizerOptions::CodecOverlap::kOn
                     : o.codec_overlap == "off" ? engine::SynthesizerOptions::CodecOverlap::kOff
                                                : engine::SynthesizerOptions::CodecOverlap::kAuto;
  engine::Synthesizer synth(*m, so);
  std::printf("model  %s (%s %s) on %s, %s weights, %s codec%s; lengths %s s; max %d streams\n", model.c_str(),
              (*m)->info().family.c_str(), (*m)->info().variant.c_str(), dev->name().c_str(),
              cpu::weight_format_name(weights), codec::codec_precision_name(codec_precision),
              synth.overlaps_codec() ? " overlapped with generation" : "", o.lengths.c_str(), o.max_streams);
  if (o.cfg_scale != 1.0f)
    std::printf("guidance  CFG %.2f on %.0f %% of the requests\n", o.cfg_scale, 100.0 * o.cfg_share);
  nlohmann::json out = {{"model", model},
                        {"device", dev->name()},
                        {"weights", cpu::weight_format_name(weights)},
                        {"codec_precision", codec::codec_precision_name(codec_precision)},
                        {"codec_overlap", synth.overlaps_codec()},
                        {"lengths", o.lengths},
                        {"cfg_scale", o.cfg_scale},
                        {"cfg_share", o.cfg_share},
                        {"points", nlohmann::json::array()}};
  std::vector<PointSteps> kept;
  Status st = run_points(
      o, seed, [&](double rate, uint64_t s) { return run_point(synth, log, o, rate, *lengths, s, kept); }, out);
  if (st.ok()) st = write_json(o, out);
  if (st.ok() && !o.steps.empty()) st = write_steps(o.steps, kept);
  if (!st.ok()) return fail(st.error());
  for (const auto& p : out["points"])
    if (p["verify_mismatches"].get<int64_t>() > 0) {
      // On the GPU without --batch-invariant a layer's kernel depends on how many rows share a step,
      // and their roundings differ: a draw near a tie may flip (docs/cuda.md). Say so, so that
      // such a result is not taken for a scheduling bug.
      const bool expected = dev->is_cuda() && !o.batch_invariant;
      return fail(std::string("bench --serve: a replayed request's codes differ from its run under load") +
                  (expected ? " (on CUDA only --batch-invariant makes a request's codes independent of the batch it "
                              "ran in; without it a draw near a tie can flip)"
                            : ""));
    }
  return 0;
}

}  // namespace chorus::cli
