// chorus encode: reference audio -> codec frames through the speech codec's encoder, written in the
// JSON form `chorus say --codes-out` writes ({"codes": [[c0, ..., c15], ...]}, one row per frame).
// Works with any folder holding the 12 Hz codec (Qwen3-TTS speech_tokenizer/, Breeze TTS 2
// audio_tokenizer/, or a codec folder).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "command.h"
#include "models/codec/codes_json.h"
#include "models/codec/speech_encoder.h"
#include "ref_audio_command.h"

namespace {

using namespace chorus;

using cli::process_cpu_seconds;

struct Options : cli::RefAudioCommand {
  std::string codes_out;
};

int run(const Options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::unique_ptr<ThreadPool> own_pool = o.make_pool();
  auto enc = codec::load_speech_encoder(o.model);
  if (!enc.ok()) return cli::fail(enc.error());
  if (own_pool) enc->set_thread_pool(own_pool.get());
  auto a = o.read_audio(static_cast<int>(enc->sample_rate()));
  if (!a.ok()) return cli::fail(a.error());
  const auto t1 = std::chrono::steady_clock::now();
  const double cpu0 = process_cpu_seconds();
  auto c = enc->encode(a->samples.data(), static_cast<int64_t>(a->samples.size()));
  if (!c.ok()) return cli::fail(o.audio + ": " + c.error().to_string());
  const double enc_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  const double enc_cpu = process_cpu_seconds() - cpu0;
  if (auto st = codec::write_codes_json(o.codes_out, c->codes.data(), c->frames, c->codebooks); !st.ok()) return cli::fail(st.error());
  std::fprintf(stderr, "encode: %.2f s of audio -> %lld frames x %lld codebooks; encoder %.3f s (%.3f s CPU, %.1fx real time), total %.2f s\n",
               a->seconds(), static_cast<long long>(c->frames), static_cast<long long>(c->codebooks), enc_s, enc_cpu,
               enc_s > 0 ? a->seconds() / enc_s : 0.0,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

chorus::cli::Runner setup(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  o->add_to(sub, "Model folder (its speech_tokenizer/ or audio_tokenizer/), a codec folder, or a Hugging Face id in "
                 "the local cache");
  sub.add_option("--codes-out", o->codes_out, "Write the codes: {\"codes\": [[c0, ..., c15], ...]}")->required();
  sub.footer("Example:\n  chorus encode --model Qwen3-TTS-12Hz-0.6B-Base --audio ref.wav --codes-out ref_codes.json\n"
             "  chorus say --model Qwen3-TTS-12Hz-0.6B-Base --speaker-embedding xvec.json --ref-codes ref_codes.json "
             "--ref-text 'What the reference says.' --text Hi -o hi.wav");
  return [o] { return run(*o); };
}

}  // namespace

CHORUS_COMMAND("encode", "Reference audio -> codec frames (reference codes) as JSON", setup);
