// chorus decode: codec frames (JSON, as `say --codes-out` writes them) -> audio, streamed through
// the 12 Hz codec decoder N frames at a time. With --bench it also reports decoder throughput and
// per-call latency (--random-frames makes input for a random-weight checkpoint); with --streams it
// decodes several streams together (Decoder::decode_batch) and stream by stream, alternating, and
// compares the two.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "audio/writer.h"
#include "audio_output.h"
#include "command.h"
#include "ref_audio_command.h"
#include "core/thread_pool.h"
#include "models/codec/codec_folder.h"
#include "models/codec/codes_json.h"
#include "runtime/cpu/kernels.h"

namespace {

struct Options {
  std::string model, codes, out, mode = "full";
  chorus::cli::AudioOutputOptions audio_out;
  int64_t chunk_frames = 0, random_frames = 0, block_frames = 4;
  uint32_t seed = 0;
  int threads = 0, streams = 1;
  bool bench = false;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

using chorus::cli::process_cpu_seconds;

struct StageClock {
  std::vector<std::pair<std::string, double>> seconds;  // in pipeline order
  Clock::time_point last;
  void mark(const std::string& name) {
    const auto now = Clock::now();
    auto it = std::find_if(seconds.begin(), seconds.end(), [&](const auto& p) { return p.first == name; });
    if (it == seconds.end()) it = seconds.insert(seconds.end(), {name, 0.0});
    it->second += std::chrono::duration<double>(now - last).count();
    last = now;
  }
};

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

chorus::Result<chorus::codec::CodeFrames> input_codes(const Options& o, const chorus::codec::Decoder& dec) {
  using namespace chorus;
  if (o.random_frames > 0) {
    codec::CodeFrames f;
    f.frames = o.random_frames;
    f.num_quantizers = dec.num_quantizers();
    f.codes.resize(static_cast<size_t>(f.frames * f.num_quantizers));
    uint64_t s = o.seed * 0x9E3779B97F4A7C15ull + 1;  // splitmix64: reproducible, no <random> needed
    for (auto& c : f.codes) {
      s += 0x9E3779B97F4A7C15ull;
      uint64_t z = s;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      c = static_cast<int32_t>((z ^ (z >> 31)) % static_cast<uint64_t>(dec.codebook_size()));
    }
    return f;
  }
  return codec::read_codes_json(o.codes, dec.num_quantizers(), dec.codebook_size());
}

// --streams S: S random streams (seeds seed .. seed + S − 1), every call their next --chunk-frames
// frames; each call is timed decoded together and, on a second set of states, stream by stream.
int run_streams(const Options& o, const chorus::codec::Decoder& dec, int threads) {
  using namespace chorus;
  const int64_t S = o.streams, T = o.random_frames, Q = dec.num_quantizers();
  const int64_t chunk = o.chunk_frames > 0 ? o.chunk_frames : T;
  std::vector<codec::CodeFrames> codes;
  std::vector<codec::DecoderState> together, alone;
  for (int64_t i = 0; i < S; ++i) {
    Options oi = o;
    oi.seed = o.seed + static_cast<uint32_t>(i);
    auto f = input_codes(oi, dec);
    if (!f.ok()) return cli::fail(f.error());
    codes.push_back(std::move(*f));
    together.push_back(dec.new_state());
    alone.push_back(dec.new_state());
  }
  std::vector<std::vector<float>> out_together(S), out_alone(S);
  double batch_s = 0, each_s = 0, batch_cpu = 0, each_cpu = 0;
  for (int64_t f = 0; f < T; f += chunk) {
    const int64_t n = std::min(chunk, T - f);
    std::vector<codec::DecoderState*> states;
    std::vector<const int32_t*> at;
    std::vector<std::vector<float>*> outs;
    for (int64_t i = 0; i < S; ++i) {
      states.push_back(&together[i]);
      at.push_back(codes[i].codes.data() + f * Q);
      outs.push_back(&out_together[i]);
    }
    const std::vector<int64_t> frames(static_cast<size_t>(S), n);
    double c0 = process_cpu_seconds();
    auto t0 = Clock::now();
    if (auto st = dec.decode_batch(states, at, frames, outs); !st.ok()) return cli::fail(st.error());
    batch_s += seconds_since(t0);
    batch_cpu += process_cpu_seconds() - c0;
    c0 = process_cpu_seconds();
    t0 = Clock::now();
    for (int64_t i = 0; i < S; ++i)
      if (auto st = dec.decode(alone[i], at[i], n, out_alone[i]); !st.ok()) return cli::fail(st.error());
    each_s += seconds_since(t0);
    each_cpu += process_cpu_seconds() - c0;
  }
  bool same = true;
  for (int64_t i = 0; i < S; ++i) same = same && out_together[i] == out_alone[i];
  const double stream_frames = static_cast<double>(S * T);
  std::printf("cpu              %s kernels, %d threads, internal step %lld frames\n", cpu::isa_name(), threads,
              static_cast<long long>(o.block_frames));
  std::printf("streams          %lld of %lld frames, %lld frames of each per call\n", static_cast<long long>(S),
              static_cast<long long>(T), static_cast<long long>(chunk));
  std::printf("together         %.1f ms per stream-frame wall, %.1f cpu: %.2f stream-frames/s\n",
              batch_s * 1e3 / stream_frames, batch_cpu * 1e3 / stream_frames, stream_frames / batch_s);
  std::printf("one by one       %.1f ms per stream-frame wall, %.1f cpu: %.2f stream-frames/s\n",
              each_s * 1e3 / stream_frames, each_cpu * 1e3 / stream_frames, stream_frames / each_s);
  std::printf("ratio            %.2fx wall, %.2fx cpu; samples %s\n", each_s / batch_s, each_cpu / batch_cpu,
              same ? "bitwise equal" : "DIFFER");
  return same ? 0 : 1;
}

int run(const Options& o) {
  using namespace chorus;
  if (o.codes.empty() == (o.random_frames <= 0))
    return cli::fail("decode: give exactly one of --codes FILE.json and --random-frames N");
  if (o.out.empty() && !o.bench) return cli::fail("decode: -o OUT is required (unless --bench)");
  if (o.chunk_frames < 0) return cli::fail("decode: --chunk-frames must be >= 1 (0: all frames in one call)");
  auto mode = codec::decode_mode_from_name(o.mode);
  if (!mode.ok()) return cli::fail(mode.error());

  const auto t_load = Clock::now();
  auto model = codec::load_codec(o.model);
  if (!model.ok()) return cli::fail(model.error());
  const double load_s = seconds_since(t_load);
  codec::Decoder dec = model->decoder;
  std::unique_ptr<ThreadPool> own_pool;
  if (o.threads > 0) {
    own_pool = std::make_unique<ThreadPool>(o.threads);
    dec.set_thread_pool(own_pool.get());
  }
  if (auto st = dec.set_block_frames(o.block_frames); !st.ok()) return cli::fail(st.error());
  if (o.streams > 1) {
    if (!o.bench || o.random_frames <= 0 || !o.out.empty() || *mode != codec::DecodeMode::kExact)
      return cli::fail("decode: --streams takes --bench --random-frames N, no -o, the full decode");
    return run_streams(o, dec, own_pool ? own_pool->size() : ThreadPool::global().size());
  }
  auto frames = input_codes(o, dec);
  if (!frames.ok()) return cli::fail(frames.error());

  std::unique_ptr<audio::AudioWriter> writer;
  if (!o.out.empty()) {
    auto wo = o.audio_out.writer_options(static_cast<int>(dec.sample_rate()));
    if (!wo.ok()) return cli::fail(wo.error());
    auto w = audio::AudioWriter::open(o.out, *wo);
    if (!w.ok()) return cli::fail(w.error());
    writer = std::move(w).value();
  }

  const int64_t T = frames->frames, Q = dec.num_quantizers();
  const int64_t chunk = o.chunk_frames > 0 ? o.chunk_frames : T;
  codec::DecoderState state = dec.new_state(*mode);
  // --bench: time between consecutive stage outputs = the time of that stage.
  StageClock stage_clock;
  if (o.bench) state.set_tap([&stage_clock](const std::string& name, const float*, int64_t, int64_t) { stage_clock.mark(name); });
  std::vector<float> samples;
  std::vector<double> call_s;
  double decode_s = 0;
  const double cpu0 = process_cpu_seconds();
  for (int64_t f = 0; f < T; f += chunk) {
    const int64_t n = std::min(chunk, T - f);
    samples.clear();
    const auto t0 = Clock::now();
    stage_clock.last = t0;
    if (auto st = dec.decode(state, frames->codes.data() + f * Q, n, samples); !st.ok()) return cli::fail(st.error());
    call_s.push_back(seconds_since(t0));
    decode_s += call_s.back();
    if (writer)
      if (auto st = writer->write(samples.data(), samples.size()); !st.ok()) return cli::fail(st.error());
  }
  const double cpu_s = process_cpu_seconds() - cpu0;
  samples.clear();
  if (auto st = dec.flush(state, samples); !st.ok()) return cli::fail(st.error());
  if (writer) {
    if (!samples.empty())
      if (auto st = writer->write(samples.data(), samples.size()); !st.ok()) return cli::fail(st.error());
    if (auto st = writer->close(); !st.ok()) return cli::fail(st.error());
  }

  const double audio_s = static_cast<double>(T * dec.samples_per_frame()) / static_cast<double>(dec.sample_rate());
  std::fprintf(stderr, "decode: %lld frames -> %.2f s of audio (%s, %lld frames per call) in %.3f s: %.1f frames/s, RTF %.3f\n",
               static_cast<long long>(T), audio_s, codec::decode_mode_name(*mode), static_cast<long long>(chunk),
               decode_s, static_cast<double>(T) / decode_s, decode_s / audio_s);
  if (o.bench) {
    ThreadPool* pool = own_pool ? own_pool.get() : &ThreadPool::global();
    std::printf("codec            %s (load %.2f s)\n", model->dir.c_str(), load_s);
    std::printf("cpu              %s kernels, %d threads, internal step %lld frames\n", cpu::isa_name(),
                pool->size(), static_cast<long long>(o.block_frames));
    std::printf("frames           %lld, %lld per call (%zu calls), mode %s\n", static_cast<long long>(T),
                static_cast<long long>(chunk), call_s.size(), codec::decode_mode_name(*mode));
    std::printf("throughput       %.2f frames/s (RTF %.3f; real time needs 12.5 frames/s)\n",
                static_cast<double>(T) / decode_s, decode_s / audio_s);
    std::printf("cpu time         %.1f ms per frame (all threads; compare with wall time on a busy machine)\n",
                cpu_s * 1e3 / static_cast<double>(T));
    std::printf("per-call latency first %.1f ms, median %.1f ms, p90 %.1f ms, max %.1f ms\n", call_s.front() * 1e3,
                percentile(call_s, 0.5) * 1e3, percentile(call_s, 0.9) * 1e3,
                *std::max_element(call_s.begin(), call_s.end()) * 1e3);
    std::printf("time per stage  ");
    double total = 0;
    for (const auto& [name, secs] : stage_clock.seconds) total += secs;
    for (const auto& [name, secs] : stage_clock.seconds)
      if (secs >= 0.005 * total) std::printf(" %s %.0f%%", name.c_str(), 100.0 * secs / total);
    std::printf("\n");
  }
  return 0;
}

chorus::cli::Runner setup(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("--model", o->model,
                 "Model folder (its speech_tokenizer/ or audio_tokenizer/), a codec folder, or a Hugging Face id in the local cache")->required();
  sub.add_option("--codes", o->codes, "Codes JSON: {\"codes\": [[c0, ..., c15], ...]}, one row per frame");
  sub.add_option("--random-frames", o->random_frames, "Decode N random frames instead of --codes (benchmarks)");
  sub.add_option("--seed", o->seed, "Seed for --random-frames")->capture_default_str();
  sub.add_option("-o,--out", o->out, "Output audio: .wav, .flac, .raw, or - for WAV on stdout");
  sub.add_option("--chunk-frames", o->chunk_frames,
                 "Frames per streaming call (0: all in one call); the samples do not depend on it")
      ->capture_default_str();
  sub.add_option("--decode", o->mode,
                 "full: the exact decode of the whole sequence (streamed); official-chunked: what the "
                 "official decoder returns (300-frame chunks with 25 frames of left context)")
      ->capture_default_str();
  o->audio_out.add_to(sub);
  sub.add_option("--threads", o->threads, "Worker threads (0: CHORUS_THREADS or all cores)")->capture_default_str();
  sub.add_option("--block-frames", o->block_frames, "Frames per internal decoder step (memory vs speed)")
      ->capture_default_str();
  sub.add_flag("--bench", o->bench, "Report throughput and per-call latency");
  sub.add_option("--streams", o->streams,
                 "With --bench --random-frames: decode this many streams together and one by one, alternating")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub.footer("Example: chorus decode --model Qwen3-TTS-12Hz-0.6B-Base --codes codes.json -o out.wav\n"
             "         chorus decode --model /tmp/q06b --random-frames 250 --chunk-frames 1 --bench\n"
             "         chorus decode --model /tmp/q06b --random-frames 40 --chunk-frames 1 --streams 4 --bench");
  return [o] { return run(*o); };
}

}  // namespace

CHORUS_COMMAND("decode", "Decode speech-codec frames (codes JSON) to audio", setup);
