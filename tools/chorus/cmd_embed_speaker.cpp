// chorus embed-speaker: reference audio -> the x-vector of a Qwen3-TTS Base checkpoint's speaker
// encoder, printed as one JSON array (the form `chorus say --speaker-embedding` reads).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <ctime>

#include "command.h"
#include "io/safetensors.h"
#include "models/qwen3_tts/config.h"
#include "models/qwen3_tts/speaker_encoder.h"
#include "voice_input.h"

namespace {

using namespace chorus;

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Options {
  std::string model, audio, out;
  cli::RefAudioOptions ref;
  int threads = 0;
};

int run(const Options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<ThreadPool> own_pool;
  if (o.threads > 0) own_pool = std::make_unique<ThreadPool>(o.threads);
  // Only the main checkpoint is needed (the speaker encoder lives there), not the codec.
  auto config = qwen3_tts::load_config(o.model);
  if (!config.ok()) return cli::fail(config.error());
  auto ckpt = io::Checkpoint::open_dir(o.model, "model");
  if (!ckpt.ok()) return cli::fail(ckpt.error());
  auto enc = qwen3_tts::SpeakerEncoder::load(*ckpt, *config);
  if (!enc.ok()) return cli::fail(enc.error());
  if (own_pool) enc->set_thread_pool(own_pool.get());
  audio::ReadOptions ro;
  ro.target_rate = static_cast<int>(enc->sample_rate());
  ro.limits = o.ref.limits();
  auto a = audio::read_audio(o.audio, ro);
  if (!a.ok()) return cli::fail(a.error());
  const auto t1 = std::chrono::steady_clock::now();
  const double cpu0 = process_cpu_seconds();
  auto x = enc->embed(a->samples.data(), static_cast<int64_t>(a->samples.size()));
  const double enc_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const double enc_cpu = process_cpu_seconds() - cpu0;
  if (!x.ok()) return cli::fail(o.audio + ": " + x.error().to_string());

  std::string json = "[";
  char buf[32];
  for (size_t i = 0; i < x->size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%.9g", i ? ", " : "", static_cast<double>((*x)[i]));  // 9 digits: exact float round trip
    json += buf;
  }
  json += "]\n";
  std::FILE* f = o.out.empty() || o.out == "-" ? stdout : std::fopen(o.out.c_str(), "wb");
  if (!f) return cli::fail(o.out + ": cannot write");
  const bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  if (f != stdout ? std::fclose(f) != 0 || !ok : std::fflush(f) != 0 || !ok) return cli::fail(o.out + ": write failed");
  std::fprintf(stderr, "embed-speaker: %.2f s of audio (%d Hz, %d channel(s)) -> %zu values; encoder %.3f s (%.3f s CPU), total %.2f s\n",
               a->seconds(), a->source_sample_rate, a->source_channels, x->size(), enc_s, enc_cpu,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

chorus::cli::Runner setup(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("--model", o->model, "Qwen3-TTS Base checkpoint folder or Hugging Face id (local cache)")->required();
  sub.add_option("--audio", o->audio, "Reference audio (WAV, FLAC, Ogg, MP3; any rate, any channels; - for stdin)")->required();
  sub.add_option("-o,--out", o->out, "Write the JSON array here instead of stdout");
  o->ref.add_to(sub);
  sub.add_option("--threads", o->threads, "Worker threads (0: CHORUS_THREADS or all cores)")->capture_default_str();
  sub.footer("Example:\n  chorus embed-speaker --model Qwen3-TTS-12Hz-0.6B-Base --audio ref.wav > xvec.json\n"
             "  chorus say --model Qwen3-TTS-12Hz-0.6B-Base --speaker-embedding xvec.json --xvector-only --text Hi -o hi.wav");
  return [o] { return run(*o); };
}

}  // namespace

CHORUS_COMMAND("embed-speaker", "Reference audio -> speaker embedding (x-vector) as a JSON array", setup);
