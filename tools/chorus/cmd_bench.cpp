// chorus bench: generation speed of a checkpoint (usually a real-size random one from make-tiny):
// time to first frame, per-frame time split into talker and code predictor (backbone and depth
// decoder for Breeze TTS 2), frames/s, real-time factor and peak memory, for a batch of B
// independent streams stepped together; on the CPU also the codec's time per frame on the
// generated codes and the end-to-end real-time factor, for --weights bf16 / int8 / int4 (CUDA:
// bf16 / int8 / fp8, with the weights' GPU memory).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "bench_serve.h"
#include "bench/engine/codec_batch_bench.h"
#include "bench/engine/cuda_bench.h"
#include "bench/engine/requests.h"
#include "command.h"
#include "engine/breeze_engine.h"
#include "engine/qwen3_tts_engine.h"
#include "engine/registry.h"
#include "models/codec/codec_folder.h"
#include "ref_audio_command.h"
#include "voice_input.h"
#include "runtime/cpu/kernels.h"
#include "runtime/cpu/quant.h"

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
  std::string weights = "bf16";  // bf16, int8, int4 (cpu) or fp8 (cuda)
  int64_t codec_chunk = 4;       // cpu: frames per codec call (0: no codec timing)
  cli::ServeBenchOptions serve;
  bool split_frames = false;  // cuda: two graphs per frame, timed apart
  bool stack_trace = false;   // cuda: the persistent decode kernel's per-phase times
  std::vector<int64_t> codec_streams;  // cuda: the codec alone, per stream vs batched, at these counts
  int64_t codec_frames = 16;
  bool codec_batched_only = false;  // --codec-streams: the batched pass alone
  std::vector<std::string> codec_precision{"f32"};  // cuda: the GPU codec's matrix products
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

// The loaded model's family-specific parts: requests, a description, stage names.
struct BenchModel {
  const engine::TtsModel* model = nullptr;
  const engine::Qwen3TtsEngine* qwen3 = nullptr;
  const engine::BreezeEngine* breeze = nullptr;

  engine::SynthesisRequest request(const bench::RequestShape& shape, uint64_t seed, int64_t frames) const {
    return qwen3 ? bench::qwen3_request(qwen3->model().config(), shape, seed, frames)
                 : bench::breeze_request(breeze->files().config, shape, seed, frames);
  }
  std::string describe() const {
    char buf[256];
    if (qwen3) {
      const auto& c = qwen3->model().config();
      std::snprintf(buf, sizeof buf, "%s, talker %lld x %lld, code predictor %lld x %lld", qwen3->info().variant.c_str(),
                    (long long)c.talker.dims.layers, (long long)c.talker.dims.hidden, (long long)c.code_predictor.dims.layers,
                    (long long)c.code_predictor.dims.hidden);
    } else {
      const auto& c = breeze->files().config;
      std::snprintf(buf, sizeof buf, "breeze-tts, backbone %lld x %lld, depth decoder %lld x %lld",
                    (long long)c.backbone.dims.layers, (long long)c.backbone.dims.hidden, (long long)c.depth.dims.layers,
                    (long long)c.depth.dims.hidden);
    }
    return buf;
  }
  // Memory held by the two stacks' projections (what --weights changes).
  std::pair<double, double> stack_mib() const {
    const double mib = 1 << 20;
    if (qwen3)
      return {qwen3->model().talker().stack().projection_bytes() / mib,
              qwen3->model().code_predictor().stack().projection_bytes() / mib};
    return {breeze->model().backbone.stack().projection_bytes() / mib, breeze->model().depth.stack().projection_bytes() / mib};
  }
  const char* first_stage() const { return qwen3 ? "talker" : "backbone"; }
  const char* second_stage() const { return qwen3 ? "code predictor" : "depth decoder"; }
};

int run(const Options& o) {
  const auto weights = cli::weight_format_option(o.weights);
  if (!weights.ok()) return cli::fail(weights.error());
  cli::ServeBenchOptions serve = o.serve;
  serve.cfg_scale = o.cfg_scale;
  if (serve.serve && !serve.url.empty()) return cli::run_serve_bench_http(serve, o.model, o.seed);
  std::vector<codec::CodecPrecision> precisions;
  for (const std::string& name : o.codec_precision) {
    auto p = codec::parse_codec_precision(name);
    if (!p.ok()) return cli::fail(p.error());
    precisions.push_back(*p);
  }
  if (precisions.empty()) return cli::fail("bench: --codec-precision needs a value");
  if (o.serve.serve) {
    if (precisions.size() != 1) return cli::fail("bench --serve: one --codec-precision at a time");
    return cli::run_serve_bench(serve, o.model, o.device, o.threads, o.seed, *weights, precisions.front());
  }
  if (o.frames < 1 || o.streams < 1 || o.text_tokens < 1 || o.warmup < 0 || o.codec_chunk < 0)
    return cli::fail("bench: --frames, --streams and --text-tokens must be >= 1, --warmup and --codec-chunk >= 0");
  if (o.device == "cuda" && !o.codec_streams.empty()) {  // the codec alone (bench/engine/codec_batch_bench.h)
    auto rep = bench::codec_batch_bench(
        {o.model, o.codec_streams, o.codec_frames, o.warmup, precisions, o.codec_batched_only});
    if (!rep.ok()) return cli::fail(rep.error());
    std::fputs(rep->c_str(), stdout);
    return 0;
  }
  if (o.device == "cuda") {  // generation on the GPU: its own report (bench/engine/cuda_bench.h)
    if (auto st = engine::weights_supported(engine::Device::cuda(), *weights); !st.ok())
      return cli::fail(st.error());
    auto act = cli::activation_precision_from_name(o.activations);
    if (!act.ok()) return cli::fail(act.error());
    auto rep = bench::cuda_bench({o.model, o.frames, o.warmup, o.batches, o.batch_frames, o.split_frames, o.stack_trace,
                                  o.serve.batch_invariant, *weights},
                                 request_shape(o, *act));
    if (!rep.ok()) return cli::fail(rep.error());
    std::fputs(rep->c_str(), stdout);
    return 0;
  }
  std::unique_ptr<ThreadPool> own_pool;
  if (o.threads > 0) own_pool = std::make_unique<ThreadPool>(o.threads);
  ThreadPool* pool = own_pool ? own_pool.get() : &ThreadPool::global();
  const auto t_load = Clock::now();
  if (o.device != "cpu") return cli::fail("bench: --device must be cpu or cuda");
  engine::LoadOptions lo;
  lo.pool = pool;
  lo.weights = *weights;
  auto loaded = engine::load_tts_model(o.model, lo);
  if (!loaded.ok()) return cli::fail(loaded.error());
  BenchModel bm{loaded->get(), dynamic_cast<const engine::Qwen3TtsEngine*>(loaded->get()),
                dynamic_cast<const engine::BreezeEngine*>(loaded->get())};
  if (!bm.qwen3 && !bm.breeze) return cli::fail("bench: unknown engine");
  const engine::TtsModel& e = *bm.model;
  const double load_s = seconds_since(t_load);
  const double rss_loaded = peak_rss_mib();

  const bench::RequestShape shape = request_shape(o, engine::ActivationPrecision::kModelDefault);
  if (o.warmup > 0) {  // touch every weight once
    auto s = e.create_stream(bm.request(shape, o.seed + 999, o.warmup));
    if (!s.ok()) return cli::fail(s.error());
    engine::TtsStream* p = s->get();
    std::vector<engine::StepResult> out(1);
    while (!p->finished())
      if (auto st = e.step({&p, 1}, out, nullptr); !st.ok()) return cli::fail(st.error());
  }

  std::vector<std::unique_ptr<engine::TtsStream>> owned;
  std::vector<engine::TtsStream*> batch;
  for (int64_t i = 0; i < o.streams; ++i) {
    auto s = e.create_stream(bm.request(shape, o.seed + static_cast<uint64_t>(i), o.frames));
    if (!s.ok()) return cli::fail(s.error());
    owned.push_back(std::move(*s));
    batch.push_back(owned.back().get());
  }
  std::vector<engine::StepResult> out(batch.size());
  std::vector<int32_t> codes0;  // stream 0's frames, for the codec
  engine::StageTimes times, first;
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  double ttff = 0;
  int64_t steps = 0;
  while (std::any_of(batch.begin(), batch.end(), [](auto* s) { return !s->finished(); })) {
    if (auto st = e.step(batch, out, &times); !st.ok()) return cli::fail(st.error());
    if (out[0].has_frame) codes0.insert(codes0.end(), out[0].codes.begin(), out[0].codes.end());
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
  const auto [stack1_mib, stack2_mib] = bm.stack_mib();
  std::printf("model            %s (%s; load %.1f s)\n", o.model.c_str(), bm.describe().c_str(), load_s);
  std::printf("weights          %s: decoder layers %.0f MiB (%s) + %.0f MiB (%s)\n", cpu::weight_format_name(*weights),
              stack1_mib, bm.first_stage(), stack2_mib, bm.second_stage());
  std::printf("cpu              %s kernels, %d threads\n", cpu::isa_name(), pool->size());
  std::printf("work             %lld stream(s) x %lld frames, %lld text tokens (prompt %lld rows), %s\n", (long long)B,
              (long long)F, (long long)o.text_tokens, (long long)owned[0]->prompt_rows(),
              o.greedy ? "greedy" : "checkpoint sampler defaults");
  std::printf("first frame      %.3f s (prefill %.3f s)\n", ttff, first.prefill_s);
  std::printf("per frame        %.1f ms per step of %lld stream(s): %s %.1f ms, %s %.1f ms\n", step_ms, (long long)B,
              bm.first_stage(), talker_ms, bm.second_stage(), cp_ms);
  std::printf("throughput       %.2f frames/s per stream, %.2f frames/s in total (real time: %.1f frames/s)\n",
              static_cast<double>(F) / wall, static_cast<double>(F * B) / wall, frame_rate);
  std::printf("real-time factor %.2f (generation time / audio time, per stream; < 1 is faster than real time)\n",
              wall / (static_cast<double>(F) / frame_rate));
  std::printf("cpu time         %.1f ms per frame per stream (all threads)\n", cpu * 1e3 / static_cast<double>(F * B));

  if (o.codec_chunk > 0) {  // stream 0's codes through the CPU codec, codec_chunk frames per call
    auto cm = codec::load_codec(o.model);
    if (!cm.ok()) return cli::fail(cm.error());
    const codec::Decoder& dec = cm->decoder;
    cm->decoder.set_thread_pool(pool);
    const int64_t Q = dec.num_quantizers(), frames = static_cast<int64_t>(codes0.size()) / std::max<int64_t>(1, Q);
    if (Q != e.info().codebooks) return cli::fail("bench: the codec's codebooks do not match the model's");
    std::vector<float> samples;
    auto warm = dec.new_state();  // one untimed call: first-touch of the codec's weights
    if (auto st = dec.decode(warm, codes0.data(), std::min<int64_t>(frames, o.codec_chunk), samples); !st.ok())
      return cli::fail(st.error());
    codec::DecoderState state = dec.new_state();
    const double ccpu0 = process_cpu_seconds();
    const auto c0 = Clock::now();
    for (int64_t f = 0; f < frames; f += o.codec_chunk) {
      samples.clear();
      if (auto st = dec.decode(state, codes0.data() + f * Q, std::min(o.codec_chunk, frames - f), samples); !st.ok())
        return cli::fail(st.error());
    }
    const double codec_ms = seconds_since(c0) * 1e3 / static_cast<double>(frames);
    const double codec_cpu = (process_cpu_seconds() - ccpu0) * 1e3 / static_cast<double>(frames);
    const double frame_ms = 1e3 / frame_rate;
    std::printf("codec            %.1f ms per frame (%lld frames, %lld per call; cpu %.1f ms per frame)\n", codec_ms,
                (long long)frames, (long long)o.codec_chunk, codec_cpu);
    std::printf("end to end       %.1f ms per frame = generation %.1f + codec %.1f: real-time factor %.2f (one stream)\n",
                step_ms + codec_ms, step_ms, codec_ms,
                (step_ms + codec_ms) / frame_ms);
  }
  std::printf("memory           peak RSS %.0f MiB (%.0f MiB after load), %.1f MiB of state per stream\n", peak_rss_mib(),
              rss_loaded, static_cast<double>(owned[0]->state_bytes()) / (1 << 20));
  return 0;
}

chorus::cli::Runner setup(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("--model", o->model, "Qwen3-TTS or Breeze TTS 2 checkpoint folder (e.g. from make-tiny --dims real-0.6b)")
      ->required();
  sub.add_option("--frames", o->frames, "Frames per stream (EOS suppressed)")->capture_default_str();
  sub.add_option("--streams", o->streams, "Independent streams stepped together")->capture_default_str();
  sub.add_option("--text-tokens", o->text_tokens, "Random text tokens in each prompt")->capture_default_str();
  sub.add_option("--warmup", o->warmup, "Frames of an untimed warm-up stream")->capture_default_str();
  sub.add_option("--threads", o->threads, "Worker threads (0: CHORUS_THREADS or all cores)")->capture_default_str();
  sub.add_option("--seed", o->seed, "Seed of stream 0 (stream i uses seed + i)")->capture_default_str();
  sub.add_option("--weights", o->weights,
                 "bf16 (as stored), or decoder layers quantised at load: int8, int4 (CPU only), fp8 (CUDA only)")
      ->capture_default_str();
  sub.add_option("--codec-chunk", o->codec_chunk,
                 "CPU: decode stream 0's frames through the codec N per call and report codec and end-to-end time "
                 "(0: skip)")
      ->capture_default_str();
  sub.add_flag("--greedy", o->greedy, "Argmax instead of the checkpoint's sampler");
  sub.add_option("--device", o->device, "cpu or cuda (generation on the GPU)")->capture_default_str();
  sub.add_option("--batches", o->batches, "With --device cuda: batch sizes to time, e.g. 1,16,64,256")->delimiter(',');
  sub.add_option("--batch-frames", o->batch_frames, "With --device cuda: frames per stream in the batch runs")
      ->capture_default_str();
  sub.add_option("--cfg-scale", o->cfg_scale,
                 "Breeze: CFG scale when not 1 (--device cuda: the design prompt's; --serve: the guided requests', "
                 "see --cfg-share)")
      ->capture_default_str();
  sub.add_option("--activations", o->activations, "Breeze with --device cuda: bf16 or f32 (default: bf16, the model's)");
  sub.add_option("--codec-streams", o->codec_streams,
                 "With --device cuda: time only the GPU codec, one new frame per stream per step, decoded stream by "
                 "stream and in one batched pass, for these stream counts, e.g. 1,8,32,64,128")
      ->delimiter(',');
  sub.add_option("--codec-frames", o->codec_frames, "With --codec-streams: timed steps per stream count")
      ->capture_default_str();
  sub.add_flag("--codec-batched-only", o->codec_batched_only,
               "With --codec-streams: time the batched pass alone, without the stream-by-stream comparison (kernel "
               "traces of the serving step; quicker at large stream counts)");
  sub.add_option("--codec-precision", o->codec_precision,
                 "The GPU codec's matrix products, f32 or bf16 (--serve: the server's codec; --codec-streams: a list, "
                 "e.g. f32,bf16, times each and compares the samples of each with the first's)")
      ->delimiter(',')
      ->capture_default_str();
  o->serve.add_to(sub);
  sub.add_flag("--split-frames", o->split_frames,
               "With --device cuda: each frame as two graphs, so the talker (backbone) and the code predictor "
               "(depth decoder) are timed apart; a little slower");
  sub.add_flag("--stack-trace", o->stack_trace,
               "With --device cuda: where the persistent decode kernel spends its time, per phase (diagnostics)");
  sub.footer("Example: chorus make-tiny --variant custom_voice --dims real-0.6b --seed 1 --out /tmp/q06\n"
             "         chorus bench --model /tmp/q06 --frames 100 --weights int8\n"
             "         chorus bench --model /tmp/q06 --device cuda --codec-streams 1,8,32,64,128\n"
             "         chorus bench --model /tmp/q06 --serve --rate 0.5 --duration 20 --verify 3\n"
             "         chorus bench --model q06 --serve --url http://127.0.0.1:8000 --voice ryan --rate 0.5 --duration 20");
  return [o] { return run(*o); };
}

}  // namespace

CHORUS_COMMAND("bench", "Measure generation speed (talker and code predictor per frame, RTF, memory)", setup);
