// chorus say: text -> codec frames (and audio) with any Qwen3-TTS checkpoint, in every mode of the
// official API: preset speaker (CustomVoice), voice description (VoiceDesign), voice clone (Base,
// from a speaker embedding alone or with reference codes and text).
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <unistd.h>
#include <memory>
#include <optional>
#include <thread>

#include "audio/writer.h"
#include "audio_output.h"
#include "command.h"
#include "engine/model.h"
#include "engine/synthesizer.h"
#include "engine/tts_model_cuda.h"
#include "io/json_util.h"
#include "models/codec/codes_json.h"
#include "voice_input.h"

namespace {

using namespace chorus;

struct Options {
  std::string model, text, text_ids, speaker, language = "auto", instruct, instruct_ids, speaker_embedding;
  std::string ref_audio, voice, ref_codes, ref_text, ref_text_ids, codes_out, out, decode_mode = "full";
  cli::RefAudioOptions ref_limits;
  bool xvector_only = false, streaming_text = false, full_text = false, greedy = false, stdin_stream = false;
  uint64_t seed = 0;
  uint32_t rng_stream = 0;
  std::optional<float> temperature, top_p, repetition_penalty, sub_temperature, sub_top_p;
  std::optional<int32_t> top_k, sub_top_k;
  std::optional<float> cfg_scale;  // Breeze TTS 2 guidance
  std::string dual_cfg;            // "SREF,SINS"
  std::string activations;         // "bf16", "f32" or "" (the model's default)
  int64_t max_frames = 0, min_frames = -1;
  double frames_per_token = engine::LengthCap{}.frames_per_token;
  int64_t cap_slack = engine::LengthCap{}.slack_frames;
  int threads = 0;
  std::string device = "cpu";
  std::string weights = "bf16";
  std::string codec_precision = "f32";
  bool verbose = false, quiet = false, download = false;
  cli::AudioOutputOptions audio_out;
};

// A JSON array of ids, inline ("[1, 2, 3]") or in a file.
Result<std::vector<int32_t>> read_ids(const std::string& arg, const char* option) {
  const bool inline_json = !arg.empty() && arg.find_first_not_of(" \t") != std::string::npos &&
                           arg[arg.find_first_not_of(" \t")] == '[';
  CHORUS_ASSIGN(io::Json j, inline_json ? io::parse_json(arg, option) : io::read_json_file(arg));
  if (!j.is_array()) return make_error(ErrorCode::kInvalidArgument, std::string(option) + ": expected a JSON array of token ids");
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      return make_error(ErrorCode::kInvalidArgument, std::string(option) + ": every id must be an integer in [0, 2^31)");
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

// A JSON array of floats, or an object holding one under "speaker_embedding".
Result<std::vector<float>> read_embedding(const std::string& path) {
  CHORUS_ASSIGN(io::Json j, io::read_json_file(path));
  const io::Json* arr = &j;
  if (j.is_object() && j.contains("speaker_embedding")) arr = &j["speaker_embedding"];
  if (!arr->is_array() || arr->empty())
    return make_error(ErrorCode::kInvalidFormat, path + ": expected a JSON array of numbers (the speaker embedding)");
  std::vector<float> v;
  for (const auto& x : *arr) {
    if (!x.is_number()) return make_error(ErrorCode::kInvalidFormat, path + ": the speaker embedding holds a non-number");
    v.push_back(x.get<float>());
  }
  return v;
}

Result<engine::SynthesisRequest> make_request(const Options& o, int64_t codebooks, int64_t codebook_size) {
  engine::SynthesisRequest r;
  if (o.stdin_stream) {
    if (!o.text.empty() || !o.text_ids.empty())
      return make_error(ErrorCode::kInvalidArgument, "--stdin-stream takes the text from standard input: drop --text / --text-ids");
  } else if (o.text.empty() == o.text_ids.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "give exactly one of --text and --text-ids (or --stdin-stream)");
  }
  r.text = o.text;
  if (!o.text_ids.empty()) {
    CHORUS_ASSIGN(r.text_ids, read_ids(o.text_ids, "--text-ids"));
  }
  r.instruct = o.instruct;
  if (!o.instruct_ids.empty()) {
    CHORUS_ASSIGN(r.instruct_ids, read_ids(o.instruct_ids, "--instruct-ids"));
  }
  r.speaker = o.speaker;
  r.language = o.language;
  if (!o.speaker_embedding.empty()) {
    CHORUS_ASSIGN(r.speaker_embedding, read_embedding(o.speaker_embedding));
  }
  if (!o.ref_codes.empty()) {
    CHORUS_ASSIGN(codec::CodeFrames f, codec::read_codes_json(o.ref_codes, codebooks, codebook_size));
    for (int64_t i = 0; i < f.frames; ++i)
      r.ref_codes.emplace_back(f.codes.begin() + i * codebooks, f.codes.begin() + (i + 1) * codebooks);
  }
  r.ref_text = o.ref_text;
  if (!o.ref_text_ids.empty()) {
    CHORUS_ASSIGN(r.ref_text_ids, read_ids(o.ref_text_ids, "--ref-text-ids"));
  }
  r.xvector_only = o.xvector_only;
  if (o.streaming_text && o.full_text) return make_error(ErrorCode::kInvalidArgument, "give at most one of --streaming-text and --full-text");
  r.layout = o.streaming_text ? engine::TextLayout::kStreaming
             : o.full_text    ? engine::TextLayout::kFull
                              : engine::TextLayout::kModelDefault;
  for (auto* s : {&r.sampler, &r.depth_sampler}) {
    if (o.greedy) s->greedy = true;
    if (o.temperature || o.top_k || o.top_p) s->greedy = o.greedy;  // asking for sampling values means sampling
    s->temperature = o.temperature;
    s->top_k = o.top_k;
    s->top_p = o.top_p;
  }
  if (o.sub_temperature) r.depth_sampler.temperature = o.sub_temperature;
  if (o.sub_top_k) r.depth_sampler.top_k = o.sub_top_k;
  if (o.sub_top_p) r.depth_sampler.top_p = o.sub_top_p;
  r.sampler.repetition_penalty = o.repetition_penalty;
  if (o.max_frames < 0) return make_error(ErrorCode::kInvalidArgument, "--max-frames must be >= 1 (0: the checkpoint's limit)");
  r.max_frames = o.max_frames;
  r.min_frames = o.min_frames;
  r.length_cap.frames_per_token = o.frames_per_token;
  r.length_cap.slack_frames = o.cap_slack;
  r.seed = o.seed;
  r.rng_stream = o.rng_stream;
  r.cfg_scale = o.cfg_scale;
  CHORUS_ASSIGN(r.activations, cli::activation_precision_from_name(o.activations));
  if (!o.dual_cfg.empty()) {
    float a = 0, b = 0;
    char tail = 0;
    if (std::sscanf(o.dual_cfg.c_str(), "%f,%f%c", &a, &b, &tail) != 2)
      return make_error(ErrorCode::kInvalidArgument, "--dual-cfg: expected SREF,SINS (two numbers)");
    r.dual_cfg = std::make_pair(a, b);
  }
  return r;
}

int run(const Options& o) {
  std::unique_ptr<ThreadPool> own_pool;
  if (o.threads > 0) own_pool = std::make_unique<ThreadPool>(o.threads);
  auto device = engine::Device::parse(o.device);
  if (!device.ok()) return cli::fail(device.error());
  if (device->is_cuda() && !engine::cuda_built())
    return cli::fail(make_error(ErrorCode::kUnsupported,
                                "--device cuda: this build has no CUDA backend (configure with -DCHORUS_CUDA=ON)"));
  auto mode = codec::decode_mode_from_name(o.decode_mode);
  if (!mode.ok()) return cli::fail(mode.error());
  if (device->is_cuda() && *mode != codec::DecodeMode::kExact)
    return cli::fail(make_error(ErrorCode::kUnsupported, "--device cuda decodes in --decode full only"));

  using Clock = std::chrono::steady_clock;
  const auto t_load = Clock::now();
  engine::LoadOptions lo;
  lo.device = *device;
  lo.pool = own_pool ? own_pool.get() : &ThreadPool::global();
  // The codec is needed for audio output, and for the size of reference codes.
  lo.codec = !o.out.empty() || !o.ref_codes.empty();
  lo.download = o.download;
  auto weights = cli::weight_format_option(o.weights);
  if (!weights.ok()) return cli::fail(weights.error());
  lo.weights = *weights;
  auto codec_precision = codec::parse_codec_precision(o.codec_precision);
  if (!codec_precision.ok()) return cli::fail(codec_precision.error());
  lo.codec_precision = *codec_precision;
  lo.download_progress = !o.quiet && isatty(fileno(stderr));
  auto model = engine::load(o.model, lo);
  if (!model.ok()) return cli::fail(model.error());
  const engine::Model& m = **model;
  const engine::ModelInfo& info = m.info();

  auto request = make_request(o, info.codebooks, m.has_codec() ? m.codec().codebook_size() : 2048);
  if (!request.ok()) return cli::fail(request.error());
  std::string voice_note;  // --ref-audio / --voice: x-vector and reference codes from the voice encoders
  if (auto st = cli::apply_voice(m, {o.ref_audio, o.voice, o.ref_limits}, *request, &voice_note); !st.ok())
    return cli::fail(st.error());
  if (!voice_note.empty()) std::fprintf(stderr, "say: %s\n", voice_note.c_str());

  std::unique_ptr<audio::AudioWriter> writer;
  if (!o.out.empty()) {
    auto wo = o.audio_out.writer_options(static_cast<int>(m.codec().sample_rate()));
    if (!wo.ok()) return cli::fail(wo.error());
    auto w = audio::AudioWriter::open(o.out, *wo);
    if (!w.ok()) return cli::fail(w.error());
    writer = std::move(*w);
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();

  engine::Synthesizer synth(*model);
  engine::SynthesisOptions so;
  so.audio = writer != nullptr;
  so.decode_mode = *mode;
  std::vector<int32_t> codes;
  // A progress line, redrawn in place, only when stderr is a terminal (logs stay clean).
  const bool progress = !o.quiet && isatty(fileno(stderr));
  const auto t0 = Clock::now();
  auto t_progress = t0;
  std::atomic<int64_t> max_frames{0};
  const auto on_chunk = [&](const engine::AudioChunk& c) -> Status {
    codes.insert(codes.end(), c.codes, c.codes + c.frames * c.codebooks);
    if (writer && c.count > 0) CHORUS_TRY(writer->write(c.samples, c.count));
    if (progress && std::chrono::duration<double>(Clock::now() - t_progress).count() > 0.1) {
      t_progress = Clock::now();
      const double el = std::chrono::duration<double>(t_progress - t0).count();
      const int64_t frames = c.first_frame + c.frames;
      const double secs = static_cast<double>(frames) / info.frame_rate;
      std::fprintf(stderr, "\rsay: frame %lld (at most %lld), %.1f s of audio, %.2fx real time ",
                   static_cast<long long>(frames), static_cast<long long>(max_frames.load()), secs, el > 0 ? secs / el : 0.0);
    }
    return ok_status();
  };
  auto job = o.stdin_stream ? synth.submit_text(*request, on_chunk, so) : synth.submit(*request, on_chunk, so);
  if (!job.ok()) {
    if (o.stdin_stream && job.error().code == ErrorCode::kUnsupported)
      return cli::fail(make_error(ErrorCode::kUnsupported, "--stdin-stream: " + job.error().message +
                                                               (request->layout == engine::TextLayout::kStreaming
                                                                    ? ""
                                                                    : " (add --streaming-text)")));
    return cli::fail(job.error());
  }
  if (o.stdin_stream) {
    // Standard input is read as it arrives (a pipe from an LLM gives a few bytes at a time) and
    // handed on at once; the end of input ends the text. The reader is left behind, blocked in
    // read(), when the request stops first (a frame limit, an error): the process is ending.
    std::thread([handle = *job] {
      char buf[4096];
      for (;;) {
        const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (!handle->append_text(std::string_view(buf, static_cast<size_t>(n))).ok()) return;
      }
      (void)handle->finish_text();
    }).detach();
  }
  max_frames = (*job)->max_frames();
  auto stats = (*job)->wait();
  if (progress) std::fprintf(stderr, "\r\033[K");
  if (!stats.ok()) return cli::fail(stats.error());
  const int64_t frames = stats->frames;
  if (writer)
    if (auto st = writer->close(); !st.ok()) return cli::fail(st.error());
  if (!o.codes_out.empty())
    if (auto st = codec::write_codes_json(o.codes_out, codes.data(), frames, info.codebooks); !st.ok()) return cli::fail(st.error());

  if (!o.quiet)
    std::fprintf(stderr, "say: %.2f s of audio (%lld frames, stopped by %s)%s%s\n", stats->audio_s,
                 static_cast<long long>(frames), engine::stop_reason_name(stats->stop),
                 o.out.empty() || o.out == "-" ? "" : " -> ", o.out == "-" ? "" : o.out.c_str());
  if (o.verbose) {
    const engine::StageTimes& t = stats->times;
    std::fprintf(stderr,
                 "say: limit %lld frames for %lld text tokens; load %.2f s; time to first frame %.3f s, to first "
                 "audio %.3f s; generation %.2f s (talker %.2f s, code predictor %.2f s); RTF %.3f\n",
                 static_cast<long long>(stats->max_frames), static_cast<long long>(stats->text_tokens), load_s,
                 stats->first_frame_s, stats->first_audio_s, stats->total_s, t.prefill_s + t.backbone_s + t.sampling_s,
                 t.depth_s, stats->audio_s > 0 ? stats->total_s / stats->audio_s : 0.0);
  }
  if (o.out.empty() && o.codes_out.empty()) std::fprintf(stderr, "say: no output requested (-o OUT.wav or --codes-out FILE.json)\n");
  return 0;
}

chorus::cli::Runner setup(CLI::App& sub) {
  auto o = std::make_shared<Options>();
  sub.add_option("--model", o->model, "Qwen3-TTS or Breeze TTS 2 checkpoint folder, or a Hugging Face id in the local cache (Org/Name[@rev])")->required();
  sub.add_option("--text", o->text, "Text to speak (needs the checkpoint's text tokenizer)");
  sub.add_flag("--stdin-stream", o->stdin_stream,
               "Speak standard input while it is still being written (e.g. piped from an LLM): Qwen3-TTS in the "
               "streaming text layout (--streaming-text, the default for voice clone), CPU or CUDA");
  sub.add_option("--text-ids", o->text_ids,
                 "Token ids wrapped as the official wrapper does (<|im_start|>assistant\\n ... <|im_end|>\\n"
                 "<|im_start|>assistant\\n): a JSON array inline or a .json file");
  sub.add_option("--speaker", o->speaker, "Preset speaker (CustomVoice)");
  sub.add_option("--language", o->language, "auto or a language of the checkpoint (english, chinese, ...)")->capture_default_str();
  sub.add_option("--instruct", o->instruct, "Style instruction (1.7B CustomVoice) or voice description (VoiceDesign)");
  sub.add_option("--instruct-ids", o->instruct_ids, "Instruction ids, wrapped (<|im_start|>user\\n ... <|im_end|>\\n)");
  sub.add_option("--speaker-embedding", o->speaker_embedding, "Voice clone (Base): x-vector as a JSON array of floats");
  sub.add_option("--ref-audio", o->ref_audio, "Voice clone (Base) from reference audio, encoded on the fly (WAV, FLAC, Ogg, MP3)");
  sub.add_option("--voice", o->voice, "Voice clone (Base) from a voice file made by `chorus voice create`");
  o->ref_limits.add_to(sub);
  sub.add_option("--ref-codes", o->ref_codes, "Voice clone (ICL): reference codes JSON in the --codes-out form");
  sub.add_option("--ref-text", o->ref_text, "Voice clone (ICL): transcript of the reference");
  sub.add_option("--ref-text-ids", o->ref_text_ids, "Transcript ids, wrapped (<|im_start|>assistant\\n ... <|im_end|>\\n)");
  sub.add_flag("--xvector-only", o->xvector_only, "Voice clone from the speaker embedding alone");
  sub.add_flag("--streaming-text", o->streaming_text, "Text fed one token per frame (default for voice clone)");
  sub.add_flag("--full-text", o->full_text, "Whole text in the prompt (default for CustomVoice / VoiceDesign)");
  sub.add_flag("--greedy", o->greedy, "Argmax decoding for every codebook");
  sub.add_option("--seed", o->seed, "Random seed: the same seed gives the same codes")->capture_default_str();
  sub.add_option("--rng-stream", o->rng_stream, "Another take with the same seed")->capture_default_str();
  sub.add_option("--temperature", o->temperature, "Sampling temperature (0: greedy); default from generation_config.json");
  sub.add_option("--top-k", o->top_k, "Top-k (0: off)");
  sub.add_option("--top-p", o->top_p, "Top-p in (0, 1] (1: off)");
  sub.add_option("--subtalker-temperature", o->sub_temperature, "Code-predictor temperature (default: --temperature)");
  sub.add_option("--subtalker-top-k", o->sub_top_k, "Code-predictor top-k");
  sub.add_option("--subtalker-top-p", o->sub_top_p, "Code-predictor top-p");
  sub.add_option("--repetition-penalty", o->repetition_penalty, "Penalty on repeated codebook-0 codes");
  sub.add_option("--max-frames", o->max_frames, "At most N frames (0: generation_config's max_new_tokens - 1)")->capture_default_str();
  sub.add_option("--min-frames", o->min_frames, "EOS is not allowed before N frames (-1: the official 2)")->capture_default_str();
  sub.add_option("--frames-per-token", o->frames_per_token,
                 "Safety cap: at most X frames per text token plus --cap-slack (0: no cap)")->capture_default_str();
  sub.add_option("--cap-slack", o->cap_slack, "Frames the safety cap allows on top")->capture_default_str();
  sub.add_option("--activations", o->activations,
                 "Breeze TTS 2: bf16 (default: rounds like upstream's bf16 run, which real checkpoints need) or f32 "
                 "(reproduces the f32 reference goldens)")
      ->check(CLI::IsMember({"bf16", "f32"}));
  sub.add_option("--cfg-scale", o->cfg_scale, "Breeze TTS 2: classifier-free guidance scale (1: off; 4 recommended with an instruction)");
  sub.add_option("--dual-cfg", o->dual_cfg, "Breeze TTS 2: dual guidance SREF,SINS (reference and instruction scales; needs both)");
  sub.add_option("--codes-out", o->codes_out, "Write the codes: {\"codes\": [[c0, ..., c15], ...]}");
  sub.add_option("-o,--out", o->out, "Write audio (.wav, .flac, .raw, - for stdout)");
  sub.add_option("--decode", o->decode_mode, "full (exact) or official-chunked")->capture_default_str();
  sub.add_option("--device", o->device, "cpu, or cuda: generation and the codec on the GPU (CUDA builds)")
      ->capture_default_str();
  sub.add_option("--weights", o->weights,
                 "bf16 (weights as stored, exact), or decoder layers quantised at load: int8, int4 (CPU only), fp8 "
                 "(CUDA only); docs/quantization.md")
      ->capture_default_str();
  sub.add_option("--codec-precision", o->codec_precision,
                 "The GPU codec's matrix products: f32 (3xTF32 tensor-core products, f32-level accuracy) or bf16 (operands "
                 "rounded to bf16 as the official runtime decodes, a sixth of the tensor-core work); CUDA only")
      ->capture_default_str();
  sub.add_option("--threads", o->threads, "Worker threads (0: CHORUS_THREADS or all cores)")->capture_default_str();
  o->audio_out.add_to(sub);
  sub.add_flag("-v,--verbose", o->verbose, "Print the frame limit, time to first frame and first audio, stage times, RTF");
  sub.add_flag("-q,--quiet", o->quiet, "No progress line and no summary");
  sub.add_flag("--download", o->download, "Download a Hugging Face --model id missing from the local cache (as `chorus pull`)");
  sub.footer("Examples:\n"
             "  chorus say --model Qwen3-TTS-12Hz-0.6B-CustomVoice --text 'Hello there.' --speaker ryan "
             "--language english -o hello.wav\n"
             "  chorus say --model tiny_base --text-ids '[1000,900,10,723,1001,10,1000,900,10]' "
             "--speaker-embedding xvec.json --xvector-only --greedy --codes-out codes.json\n"
             "  my-llm | chorus say --model Qwen3-TTS-12Hz-0.6B-CustomVoice --speaker ryan --streaming-text "
             "--stdin-stream -o answer.wav");
  return [o] { return run(*o); };
}

}  // namespace

CHORUS_COMMAND("say", "Synthesize speech: text -> codec frames -> audio", setup);
