// chorus embed-speaker: reference audio -> the x-vector of a Qwen3-TTS Base checkpoint's speaker
// encoder, printed as one JSON array (the form `chorus say --speaker-embedding` reads).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "command.h"
#include "io/model_dir.h"
#include "io/safetensors.h"
#include "models/qwen3_tts/config.h"
#include "models/qwen3_tts/speaker_encoder.h"
#include "ref_audio_command.h"

namespace {

using namespace chorus;

using cli::process_cpu_seconds;

struct Options : cli::RefAudioCommand {
  std::string out;
};

int run(const Options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::unique_ptr<ThreadPool> own_pool = o.make_pool();
  auto dir = io::resolve_model_dir(o.model);
  if (!dir.ok()) return cli::fail(dir.error());
  // Only the main checkpoint is needed (the speaker encoder lives there), not the codec.
  auto config = qwen3_tts::load_config(*dir);
  if (!config.ok()) return cli::fail(config.error());
  auto ckpt = io::Checkpoint::open_dir(*dir, "model");
  if (!ckpt.ok()) return cli::fail(ckpt.error());
  auto enc = qwen3_tts::SpeakerEncoder::load(*ckpt, *config);
  if (!enc.ok()) return cli::fail(enc.error());
  if (own_pool) enc->set_thread_pool(own_pool.get());
  auto a = o.read_audio(static_cast<int>(enc->sample_rate()));
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
  o->add_to(sub, "Qwen3-TTS Base checkpoint folder or Hugging Face id (local cache)");
  sub.add_option("-o,--out", o->out, "Write the JSON array here instead of stdout");
  sub.footer("Example:\n  chorus embed-speaker --model Qwen3-TTS-12Hz-0.6B-Base --audio ref.wav > xvec.json\n"
             "  chorus say --model Qwen3-TTS-12Hz-0.6B-Base --speaker-embedding xvec.json --xvector-only --text Hi -o hi.wav");
  return [o] { return run(*o); };
}

}  // namespace

CHORUS_COMMAND("embed-speaker", "Reference audio -> speaker embedding (x-vector) as a JSON array", setup);
