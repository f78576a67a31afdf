// chorus embed-speaker: reference audio -> the x-vector of a Qwen3-TTS Base checkpoint's speaker
// encoder, printed as one JSON array (the form `chorus say --speaker-embedding` reads).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "command.h"
#include "io/safetensors.h"
#include "models/qwen3_tts/config.h"
#include "models/qwen3_tts/speaker_encoder.h"
#include "voice_input.h"

namespace {

using namespace chorus;

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
  auto x = enc->embed(a->samples.data(), static_cast<int64_t>(a->samples.size()));
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
  std::fprintf(stderr, "embed-speaker: %.2f s of audio (%d Hz, %d channel(s)) -> %zu values in %.2f s\n", a->seconds(),
               a->source_sample_rate, a->source_channels, x->size(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

chorus::cli::Runner setup(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("--model", o->model, "Qwen3-TTS Base checkpoint folder")->required();
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
