// chorus voice: voice files (docs/voice.md).
//   voice create  reference audio (+ transcript) -> NAME.voice: x-vector, reference codes, text,
//                 encoded once and reused with `chorus say --voice NAME.voice`
//   voice info    what a voice file holds (validated as `say` would), as JSON
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "command.h"
#include "models/breeze_tts/voice.h"
#include "models/family.h"
#include "models/qwen3_tts/voice_encoder.h"
#include "voice_input.h"

namespace {

using namespace chorus;

struct CreateOptions {
  std::string model, audio, ref_text, ref_text_ids, out;
  bool xvector_only = false;
  cli::RefAudioOptions ref;
  int threads = 0;
};

// Breeze TTS 2: reference codes from the codec encoder plus the transcript (raw ids); no x-vector.
int run_create_breeze(const CreateOptions& o, voice::Voice text, ThreadPool* pool,
                      std::chrono::steady_clock::time_point t0) {
  if (o.xvector_only) return cli::fail("voice create: Breeze TTS 2 has no x-vector (drop --xvector-only)");
  auto files = breeze_tts::open_model_files(o.model);
  if (!files.ok()) return cli::fail(files.error());
  auto enc = breeze_tts::VoiceEncoder::from_files(*files, pool);
  if (!enc.ok()) return cli::fail(enc.error());
  auto v = enc->encode_file(o.audio, o.ref.limits());
  if (!v.ok()) return cli::fail(v.error());
  v->ref_text = text.ref_text;
  v->ref_text_ids = text.ref_text_ids;
  if (auto st = voice::write_voice_file(o.out, *v); !st.ok()) return cli::fail(st.error());
  std::fprintf(stderr, "voice create: %s: %.2f s of reference -> %lld reference frames (Breeze TTS 2), %s; %.2f s\n",
               o.out.c_str(), v->ref_seconds, static_cast<long long>(v->frames),
               v->has_ref_text() ? "with reference text" : "no reference text (give --ref-text to say)",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

int run_create(const CreateOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!o.ref_text.empty() && !o.ref_text_ids.empty()) return cli::fail("voice create: give at most one of --ref-text and --ref-text-ids");
  if (o.xvector_only && (!o.ref_text.empty() || !o.ref_text_ids.empty()))
    return cli::fail("voice create: --xvector-only voices hold no reference text");
  voice::Voice voice;
  voice.ref_text = o.ref_text;
  if (!o.ref_text_ids.empty()) {
    auto ids = cli::read_id_array(o.ref_text_ids, "--ref-text-ids");
    if (!ids.ok()) return cli::fail(ids.error());
    voice.ref_text_ids = std::move(*ids);
  }
  std::unique_ptr<ThreadPool> own_pool;
  if (o.threads > 0) own_pool = std::make_unique<ThreadPool>(o.threads);
  ThreadPool* pool = own_pool ? own_pool.get() : &ThreadPool::global();
  auto family = detect_family(o.model);
  if (!family.ok()) return cli::fail(family.error());
  if (*family == Family::kBreezeTts) return run_create_breeze(o, voice, pool, t0);
  auto enc = qwen3_tts::VoiceEncoder::load(o.model, pool);
  if (!enc.ok()) return cli::fail(enc.error());
  // Codes are kept whenever the codec can make them: a voice without text can get one later only
  // by re-encoding, and they cost 64 bytes per frame.
  const bool with_codes = !o.xvector_only && enc->has_speech_encoder();
  auto v = enc->encode_file(o.audio, with_codes, o.ref.limits());
  if (!v.ok()) return cli::fail(v.error());
  v->ref_text = voice.ref_text;
  v->ref_text_ids = voice.ref_text_ids;
  if (auto st = voice::write_voice_file(o.out, *v); !st.ok()) return cli::fail(st.error());
  std::fprintf(stderr, "voice create: %s: %.2f s of reference -> x-vector of %zu, %lld reference frames, %s; %.2f s\n",
               o.out.c_str(), v->ref_seconds, v->x_vector.size(), static_cast<long long>(v->frames),
               v->has_ref_text() ? "with reference text (in-context cloning)" : "no reference text (x-vector cloning)",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

int run_info(const std::string& path) {
  auto v = voice::read_voice_file(path);
  if (!v.ok()) return cli::fail(v.error());
  nlohmann::json j = {{"file", path},
                      {"model_family", v->model_family},
                      {"speaker_dim", v->x_vector.size()},
                      {"ref_frames", v->frames},
                      {"codebooks", v->codebooks},
                      {"ref_seconds", v->ref_seconds}};
  if (!v->ref_text.empty()) j["ref_text"] = v->ref_text;
  if (!v->ref_text_ids.empty()) j["ref_text_ids"] = v->ref_text_ids;
  if (!v->codec.empty()) j["codec"] = v->codec;
  std::printf("%s\n", j.dump(1).c_str());
  return 0;
}

chorus::cli::Runner setup(CLI::App& sub) {
  sub.require_subcommand(1);
  auto o = std::make_shared<CreateOptions>();
  CLI::App* create = sub.add_subcommand("create", "Reference audio (+ transcript) -> NAME.voice");
  create->add_option("--model", o->model, "Qwen3-TTS Base or Breeze TTS 2 checkpoint folder, or a Hugging Face id in the local cache")->required();
  create->add_option("--audio", o->audio, "Reference audio (WAV, FLAC, Ogg, MP3; any rate, any channels)")->required();
  create->add_option("--ref-text", o->ref_text, "Transcript of the reference (enables in-context cloning)");
  create->add_option("--ref-text-ids", o->ref_text_ids,
                     "Transcript ids, wrapped (<|im_start|>assistant\\n ... <|im_end|>\\n; Breeze: raw ids): a JSON array inline or a file");
  create->add_flag("--xvector-only", o->xvector_only, "Keep only the x-vector (no reference codes or text)");
  create->add_option("-o,--out", o->out, "Voice file to write (NAME.voice)")->required();
  o->ref.add_to(*create);
  create->add_option("--threads", o->threads, "Worker threads (0: CHORUS_THREADS or all cores)")->capture_default_str();
  auto info_path = std::make_shared<std::string>();
  CLI::App* info = sub.add_subcommand("info", "Validate a voice file and print what it holds");
  info->add_option("file", *info_path, "Voice file")->required();
  sub.footer("Example:\n  chorus voice create --model Qwen3-TTS-12Hz-0.6B-Base --audio ref.wav "
             "--ref-text 'What the reference says.' -o alice.voice\n"
             "  chorus say --model Qwen3-TTS-12Hz-0.6B-Base --voice alice.voice --text 'Hello.' -o hello.wav");
  return [o, create, info_path] { return create->parsed() ? run_create(*o) : run_info(*info_path); };
}

}  // namespace

CHORUS_COMMAND("voice", "Voice files: encode a reference voice once (create), inspect one (info)", setup);
