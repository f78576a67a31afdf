// chorus bench: generation speed of a checkpoint (usually a real-size random one from make-tiny):
// time to first frame, per-frame time split into talker and code predictor, frames/s, real-time
// factor and peak memory, for a batch of B independent streams stepped together.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "bench_serve.h"
#include "bench/engine/cuda_bench.h"
#include "bench/engine/requests.h"
#include "command.h"
#include "engine/qwen3_tts_engine.h"
#include "ref_audio_command.h"
#include "voice_input.h"
#include "runtime/cpu/kernels.h"

namespace {

using namespace chorus;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model;
  int64_t frames = 100, streams = 1, text_tokens = 30, warmup = 2;
  int threads = 0;
  uint64_t seed = 1;
  bool greedy = false;
  std::string device = "cpu";
  std::vector<int64_t> batches;  // --device cuda: batch sizes to measure
  int64_t batch_frames = 100;
  float cfg_scale = 1.0f;  // Breeze on cuda: guidance scale (≠ 1: design prompt with CFG)
  std::string activations;  // Breeze on cuda: "bf16", "f32" or "" (the model's default, bf16)
  cli::ServeBenchOptions serve;
  bool split_frames = false;  // cuda: two graphs per frame, timed apart
  bool stack_trace = false;   // cuda: the persistent decode kernel's per-phase times
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using chorus::cli::process_cpu_seconds;

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux reports KiB
}

bench::RequestShape request_shape(const Options& o, engine::ActivationPrecision activations) {
  bench::RequestShape r;
  r.text_tokens = o.text_tokens;
  r.greedy = o.greedy;
  r.cfg_scale = o.cfg_scale;
  r.activations = activations;
  return r;
}

int run(const Options& o) {
  if (o.serve.serve && !o.serve.url.empty()) return cli::run_serve_bench_http(o.serve, o.model, o.seed);
  if (o.serve.serve) return cli::run_serve_bench(o.serve, o.model, o.device, o.threads, o.seed);
  if (o.frames < 1 || o.streams < 1 || o.text_tokens < 1 || o.warmup < 0)
    return cli::fail("bench: --frames, --streams and --text-tokens must be >= 1, --warmup >= 0");
  if (o.device == "cuda") {  // generation on the GPU: its own report (bench/engine/cuda_bench.h)
    auto act = cli::activation_precision_from_name(o.activations);
    if (!act.ok()) return cli::fail(act.error());
    auto rep = bench::cuda_bench({o.model, o.frames, o.warmup, o.batches, o.batch_frames, o.split_frames, o.stack_trace},
                                 request_shape(o, *act));
    if (!rep.ok()) return cli::fail(rep.error());
    std::fputs(rep->c_str(), stdout);
    return 0;
  }
  if (o.device != "cpu") return cli::fail("bench: --device must be cpu or cuda");
  std::unique_ptr<ThreadPool> own_pool;
  if (o.threads > 0) own_pool = std::make_unique<ThreadPool>(o.threads);
  ThreadPool* pool = own_pool ? own_pool.get() : &ThreadPool::global();
  const auto t_load = Clock::now();
  auto loaded = engine::Qwen3TtsEngine::load(o.model, pool);
  if (!loaded.ok()) return cli::fail(loaded.error());
  const engine::Qwen3TtsEngine& e = **loaded;
  const double load_s = seconds_since(t_load);
  const double rss_loaded = peak_rss_mib();
  const bench::RequestShape shape = request_shape(o, engine::ActivationPrecision::kModelDefault);
  if (o.warmup > 0) {  // touch every weight once
    auto s = e.create_stream(bench::qwen3_request(e.model().config(), shape, o.seed + 999, o.warmup));
    if (!s.ok()) return cli::fail(s.error());
    engine::TtsStream* p = s->get();
    std::vector<engine::StepResult> out(1);
    while (!p->finished())
      if (auto st = e.step({&p, 1}, out, nullptr); !st.ok()) return cli::fail(st.error());
  }

  std::vector<std::unique_ptr<engine::TtsStream>> owned;
  std::vector<engine::TtsStream*> batch;
  for (int64_t i = 0; i < o.streams; ++i) {
    auto s = e.create_stream(bench::qwen3_request(e.model().config(), shape, o.seed + static_cast<uint64_t>(i), o.frames));
    if (!s.ok()) return cli::fail(s.error());
    owned.push_back(std::move(*s));
    batch.push_back(owned.back().get());
  }
  std::vector<engine::StepResult> out(batch.size());
  engine::StageTimes times, first;
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  double ttff = 0;
  int64_t steps = 0;
  while (std::any_of(batch.begin(), batch.end(), [](auto* s) { return !s->finished(); })) {
    if (auto st = e.step(batch, out, &times); !st.ok()) return cli::fail(st.error());
    if (steps++ == 0) {
      ttff = seconds_since(t0);
      first = times;
    }
  }
  const double wall = seconds_since(t0), cpu = process_cpu_seconds() - cpu0;
  const double frame_rate = e.info().frame_rate;
  const int64_t F = o.frames, B = o.streams;
  // Steady-state per-frame costs exclude the first step (prefill + frame 0).
  const double n = static_cast<double>(std::max<int64_t>(1, F - 1));
  const double talker_ms = (times.backbone_s + times.sampling_s - first.backbone_s - first.sampling_s) / n * 1e3;
  const double cp_ms = (times.depth_s - first.depth_s) / n * 1e3;
  const double step_ms = (wall - ttff) / n * 1e3;
  const auto& c = e.model().config();
  std::printf("model            %s (%s, talker %lld x %lld, code predictor %lld x %lld; load %.1f s)\n", o.model.c_str(),
              e.info().variant.c_str(), (long long)c.talker.dims.layers, (long long)c.talker.dims.hidden,
              (long long)c.code_predictor.dims.layers, (long long)c.code_predictor.dims.hidden, load_s);
  std::printf("cpu              %s kernels, %d threads\n", cpu::isa_name(), pool->size());
  std::printf("work             %lld stream(s) x %lld frames, %lld text tokens (prompt %lld rows), %s\n", (long long)B,
              (long long)F, (long long)o.text_tokens, (long long)owned[0]->prompt_rows(),
              o.greedy ? "greedy" : "checkpoint sampler defaults");
  std::printf("first frame      %.3f s (prefill %.3f s)\n", ttff, first.prefill_s);
  std::printf("per frame        %.1f ms per step of %lld stream(s): talker %.1f ms, code predictor %.1f ms\n", step_ms,
              (long long)B, talker_ms, cp_ms);
  std::printf("throughput       %.2f frames/s per stream, %.2f frames/s in total (real time: %.1f frames/s)\n",
              static_cast<double>(F) / wall, static_cast<double>(F * B) / wall, frame_rate);
  std::printf("real-time factor %.2f (generation time / audio time, per stream; < 1 is faster than real time)\n",
              wall / (static_cast<double>(F) / frame_rate));
  std::printf("cpu time         %.1f ms per frame per stream (all threads)\n", cpu * 1e3 / static_cast<double>(F * B));
  std::printf("memory           peak RSS %.0f MiB (%.0f MiB after load), %.1f MiB of state per stream\n", peak_rss_mib(),
              rss_loaded, static_cast<double>(owned[0]->state_bytes()) / (1 << 20));
  return 0;
}

chorus::cli::Runner setup(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("--model", o->model, "Qwen3-TTS checkpoint folder (e.g. from make-tiny --dims real-0.6b)")->required();
  sub.add_option("--frames", o->frames, "Frames per stream (EOS suppressed)")->capture_default_str();
  sub.add_option("--streams", o->streams, "Independent streams stepped together")->capture_default_str();
  sub.add_option("--text-tokens", o->text_tokens, "Random text tokens in each prompt")->capture_default_str();
  sub.add_option("--warmup", o->warmup, "Frames of an untimed warm-up stream")->capture_default_str();
  sub.add_option("--threads", o->threads, "Worker threads (0: CHORUS_THREADS or all cores)")->capture_default_str();
  sub.add_option("--seed", o->seed, "Seed of stream 0 (stream i uses seed + i)")->capture_default_str();
  sub.add_flag("--greedy", o->greedy, "Argmax instead of the checkpoint's sampler");
  sub.add_option("--device", o->device, "cpu or cuda (generation on the GPU)")->capture_default_str();
  sub.add_option("--batches", o->batches, "With --device cuda: batch sizes to time, e.g. 1,16,64,256")->delimiter(',');
  sub.add_option("--batch-frames", o->batch_frames, "With --device cuda: frames per stream in the batch runs")
      ->capture_default_str();
  sub.add_option("--cfg-scale", o->cfg_scale, "Breeze with --device cuda: CFG scale (design prompt) when not 1")
      ->capture_default_str();
  sub.add_option("--activations", o->activations, "Breeze with --device cuda: bf16 or f32 (default: bf16, the model's)");
  o->serve.add_to(sub);
  sub.add_flag("--split-frames", o->split_frames,
               "With --device cuda: each frame as two graphs, so the talker (backbone) and the code predictor "
               "(depth decoder) are timed apart; a little slower");
  sub.add_flag("--stack-trace", o->stack_trace,
               "With --device cuda: where the persistent decode kernel spends its time, per phase (diagnostics)");
  sub.footer("Example: chorus make-tiny --variant custom_voice --dims real-0.6b --seed 1 --out /tmp/q06\n"
             "         chorus bench --model /tmp/q06 --frames 100\n"
             "         chorus bench --model /tmp/q06 --serve --rate 0.5 --duration 20 --verify 3\n"
             "         chorus bench --model q06 --serve --url http://127.0.0.1:8000 --voice ryan --rate 0.5 --duration 20");
  return [o] { return run(*o); };
}

}  // namespace

CHORUS_COMMAND("bench", "Measure generation speed (talker and code predictor per frame, RTF, memory)", setup);
