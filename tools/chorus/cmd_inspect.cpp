// chorus inspect: what a checkpoint folder holds and whether every tensor matches its config.
#include <cstdio>
#include <filesystem>
#include <set>

#include "command.h"
#include "models/breeze_tts/checkpoint.h"
#include "models/family.h"
#include "models/qwen3_tts/checkpoint.h"

namespace {

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

std::string dtypes_of(const chorus::io::Checkpoint& c) {
  std::set<std::string> d;
  for (const auto& n : c.names()) d.insert(chorus::dtype_name(c.find(n)->dtype));
  std::string s;
  for (const auto& x : d) s += (s.empty() ? "" : ", ") + x;
  return s;
}

int inspect_qwen3(const std::string& dir) {
  using namespace chorus;
  auto files = qwen3_tts::open_model_files(dir);
  if (!files.ok()) return cli::fail(files.error());
  const auto& c = files->config;
  const auto& t = c.talker.dims;
  const auto& p = c.code_predictor.dims;
  namespace fs = std::filesystem;
  std::printf("model            %s\n", dir.c_str());
  std::printf("family           qwen3-tts\n");
  std::printf("variant          %s (tts_model_size %s)\n", qwen3_tts::variant_name(c.variant), c.size_label.c_str());
  std::printf("talker           %lld layers, hidden %lld, %lld/%lld heads x %lld, mlp %lld, codec vocab %lld, text vocab %lld\n",
              (long long)t.layers, (long long)t.hidden, (long long)t.heads, (long long)t.kv_heads, (long long)t.head_dim,
              (long long)t.intermediate, (long long)c.talker.codec_vocab, (long long)c.talker.text_vocab);
  std::printf("code predictor   %lld layers, hidden %lld, %lld codebooks of %lld%s\n", (long long)p.layers,
              (long long)p.hidden, (long long)c.code_predictor.num_code_groups, (long long)c.code_predictor.vocab,
              p.hidden != t.hidden ? " (with projection from the talker width)" : "");
  std::printf("parameters       %s in model.safetensors (%s), %s in speech_tokenizer (%s)\n",
              with_commas(files->main_params).c_str(), dtypes_of(files->main).c_str(),
              with_commas(files->codec_params).c_str(), dtypes_of(files->codec).c_str());
  std::printf("tensors          %zu + %zu, all match the config\n", files->main.names().size(), files->codec.names().size());
  for (const auto& n : files->unexpected_main) std::printf("  not used       %s\n", n.c_str());
  for (const auto& n : files->unexpected_codec) std::printf("  not used       speech_tokenizer/%s\n", n.c_str());
  std::string langs;
  for (const auto& [k, v] : c.talker.language_ids) langs += (langs.empty() ? "" : ", ") + k;
  std::printf("languages        auto, %s\n", langs.c_str());
  if (!c.talker.speaker_ids.empty()) {
    std::string spk;
    for (const auto& [k, v] : c.talker.speaker_ids) spk += (spk.empty() ? "" : ", ") + k;
    std::printf("speakers         %s\n", spk.c_str());
  }
  if (c.speaker_encoder) std::printf("speaker encoder  ECAPA-TDNN, x-vector of %lld\n", (long long)c.speaker_encoder->enc_dim);
  std::printf("speech codec     %lld codebooks x %lld, %lld Hz, %lld samples per frame, encoder %s\n",
              (long long)c.codec.decoder.num_quantizers, (long long)c.codec.decoder.codebook_size,
              (long long)c.codec.sample_rate, (long long)c.codec.samples_per_frame,
              files->codec_has_encoder ? "present (voice cloning available)" : "absent");
  const bool has_tok = fs::exists(fs::path(dir) / "vocab.json") && fs::exists(fs::path(dir) / "merges.txt");
  std::printf("text tokenizer   %s\n", has_tok ? "vocab.json + merges.txt" : "absent (use --text-ids)");
  const auto& g = c.generation;
  std::printf("sampler defaults temperature %.2f, top-k %lld, top-p %.2f, repetition penalty %.2f; "
              "code predictor temperature %.2f, top-k %lld; max %lld frames\n",
              g.temperature, (long long)g.top_k, g.top_p, g.repetition_penalty, g.sub_temperature,
              (long long)g.sub_top_k, (long long)g.max_new_tokens);
  return 0;
}

int inspect_breeze(const std::string& dir) {
  using namespace chorus;
  auto files = breeze_tts::open_model_files(dir);
  if (!files.ok()) return cli::fail(files.error());
  const auto& c = files->config;
  const auto& te = c.text_encoder;
  const auto& b = c.backbone.dims;
  const auto& d = c.depth.dims;
  int64_t full = 0;
  for (auto lt : te.layer_types) full += lt == breeze_tts::TextLayerType::kFull;
  std::printf("model            %s\n", dir.c_str());
  std::printf("family           breeze-tts\n");
  std::printf("text encoder     T5Gemma2, %lld layers (%lld full, %lld sliding window %lld), hidden %lld, %lld/%lld heads x %lld, "
              "mlp %lld, vocab %lld, projected to %lld\n",
              (long long)te.layers, (long long)full, (long long)(te.layers - full), (long long)te.sliding_window,
              (long long)te.hidden, (long long)te.heads, (long long)te.kv_heads, (long long)te.head_dim,
              (long long)te.intermediate, (long long)c.text_vocab, (long long)c.hidden);
  std::printf("backbone         Qwen3, %lld layers, hidden %lld, %lld/%lld heads x %lld, mlp %lld, head %lld classes "
              "(EOS = %lld)\n",
              (long long)b.layers, (long long)b.hidden, (long long)b.heads, (long long)b.kv_heads, (long long)b.head_dim,
              (long long)b.intermediate, (long long)c.lm_head_rows(), (long long)c.backbone_eos());
  std::printf("depth decoder    %lld layers, hidden %lld, %lld/%lld heads x %lld, mlp %lld, rope %s; %lld codebooks x %lld "
              "(codes below %lld, the rest reserved)\n",
              (long long)d.layers, (long long)d.hidden, (long long)d.heads, (long long)d.kv_heads, (long long)d.head_dim,
              (long long)d.intermediate, c.depth.rope_scaling.enabled ? "llama3-scaled" : "plain",
              (long long)c.num_codebooks, (long long)c.audio_vocab, (long long)c.codec_codebook_size);
  std::printf("parameters       %s in model.safetensors (%s), %s in audio_tokenizer (%s)\n",
              with_commas(files->main_params).c_str(), dtypes_of(files->main).c_str(),
              with_commas(files->codec_params).c_str(), dtypes_of(files->codec).c_str());
  std::printf("tensors          %zu + %zu, all match the config\n", files->main.names().size(), files->codec.names().size());
  size_t dead_codec = 0;
  for (const auto& n : files->unexpected_main) {
    if (n.rfind("codec_model.", 0) == 0) ++dead_codec;
    else std::printf("  not used       %s\n", n.c_str());
  }
  if (dead_codec) std::printf("  not used       %zu codec_model.* tensors (a Mimi leftover)\n", dead_codec);
  for (const auto& n : files->unexpected_codec) std::printf("  not used       audio_tokenizer/%s\n", n.c_str());
  std::printf("speech codec     %lld codebooks x %lld, %lld Hz, %lld samples per frame, encoder %s\n",
              (long long)c.codec.decoder.num_quantizers, (long long)c.codec.decoder.codebook_size,
              (long long)c.codec.sample_rate, (long long)c.codec.samples_per_frame,
              files->codec_has_encoder ? "present (voice cloning available)" : "absent");
  std::printf("special ids      bos %lld, [S0] %lld, <ins_bos> %lld, <ins_eos> %lld, <|AUDIO|> %lld, <|audio_eos|> %lld\n",
              (long long)c.ids.bos, (long long)c.ids.speakers[0], (long long)c.ids.ins_bos, (long long)c.ids.ins_eos,
              (long long)c.ids.audio, (long long)c.ids.audio_eos);
  std::printf("text tokenizer   %s\n", files->tokenizer_path.empty() ? "absent (use --text-ids)" : "tokenizer.model (SentencePiece)");
  const auto& g = c.generation;
  std::printf("sampler defaults temperature %.2f, top-k %lld, top-p %.2f, repetition penalty %.2f; depth temperature "
              "%.2f, top-k %lld; max %lld frames\n",
              g.temperature, (long long)g.top_k, g.top_p, g.repetition_penalty, g.depth_temperature,
              (long long)g.depth_top_k, (long long)g.max_new_tokens);
  return 0;
}

chorus::cli::Runner setup(CLI::App& sub) {
  auto dir = std::make_shared<std::string>();
  sub.add_option("MODEL_DIR", *dir, "Checkpoint folder (Hugging Face layout)")->required();
  return [dir] {
    using namespace chorus;
    auto fam = detect_family(*dir);
    if (!fam.ok()) return cli::fail(fam.error());
    if (*fam == Family::kQwen3Tts) return inspect_qwen3(*dir);
    return inspect_breeze(*dir);
  };
}

}  // namespace

CHORUS_COMMAND("inspect", "Describe a checkpoint and check every tensor against its config", setup);
