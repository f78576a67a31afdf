#include "models/breeze_tts/tokenizer.h"

#include <algorithm>

namespace chorus::breeze_tts {

text::AddedTokens added_tokens(const Config& c) {
  const auto& ids = c.ids;
  text::AddedTokens out = {{"<pad>", static_cast<int32_t>(ids.pad)},
                           {"<eos>", static_cast<int32_t>(ids.eos)},
                           {"<bos>", static_cast<int32_t>(ids.bos)},
                           {"<|AUDIO|>", static_cast<int32_t>(ids.audio)},
                           {"<|audio_eos|>", static_cast<int32_t>(ids.audio_eos)},
                           {"<ins_bos>", static_cast<int32_t>(ids.ins_bos)},
                           {"<ins_eos>", static_cast<int32_t>(ids.ins_eos)}};
  for (size_t i = 0; i < ids.speakers.size(); ++i)
    out.push_back({"[S" + std::to_string(i) + "]", static_cast<int32_t>(ids.speakers[i])});
  return out;
}

Result<text::SentencePieceTokenizer> load_tokenizer(const std::string& model_path, const Config& c) {
  CHORUS_ASSIGN(auto tok, text::SentencePieceTokenizer::load(model_path, added_tokens(c)));
  // Every id the tokenizer can produce must index the encoder's embedding table.
  if (tok.piece_count() > c.text_vocab)
    return make_error(ErrorCode::kInvalidFormat, model_path + ": " + std::to_string(tok.piece_count()) +
                                                     " pieces, but the text encoder has only " +
                                                     std::to_string(c.text_vocab) + " embedding rows");
  return tok;
}

namespace {

// Our own training text for make-tiny's tokenizer: plain English, digits and punctuation.
constexpr const char* kTinyCorpus[] = {
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "She sells sea shells by the sea shore, and the shells she sells are surely from the shore.",
    "A tiny model speaks in noise, because its weights were drawn at random.",
    "Please read the following sentence clearly and naturally.",
    "Speak clearly and naturally, with a warm and friendly voice.",
    "Good morning! How are you today? I hope the weather is kind to you.",
    "We measured 42 samples at 24000 hertz, then 1920 more for the next frame.",
    "Numbers like 3.14, 2048 and 12.5 appear in technical text quite often.",
    "The train leaves at seven o'clock; do not be late for it again.",
    "Whisper softly, then laugh out loud, and finally sigh with relief.",
    "In the beginning there was silence, and then there was sound.",
    "Reading aloud helps a listener follow the story from start to end.",
    "Every speaker has a voice of their own: deep, bright, calm or excited.",
    "Text to speech systems turn written words into spoken audio.",
    "Codec frames arrive twelve and a half times per second.",
    "An old lighthouse keeper counted the waves until dawn.",
    "They walked through the quiet village while the bells rang.",
    "Could you repeat that slowly? I would like to write it down.",
    "The recipe needs two eggs, one cup of flour and a pinch of salt.",
    "Thank you for listening, and have a wonderful evening.",
};

}  // namespace

Result<std::string> train_tiny_tokenizer(const Config& c) {
  int64_t lowest = c.text_vocab;
  const int64_t controls = std::max({c.ids.pad, c.ids.eos, c.ids.bos});
  for (const auto& [text, id] : added_tokens(c))
    if (id > controls) lowest = std::min<int64_t>(lowest, id);
  if (c.text_encoder.eoi_token_id > controls) lowest = std::min(lowest, c.text_encoder.eoi_token_id);
  text::SentencePieceTrainOptions o;
  o.vocab_size = static_cast<int>(std::min<int64_t>(lowest, 1000));
  o.pad_id = static_cast<int>(c.ids.pad);
  o.eos_id = static_cast<int>(c.ids.eos);
  o.bos_id = static_cast<int>(c.ids.bos);
  int unk = 0;  // the first id the control tokens leave free
  while (unk == o.pad_id || unk == o.eos_id || unk == o.bos_id) ++unk;
  o.unk_id = unk;
  const std::vector<std::string> corpus(std::begin(kTinyCorpus), std::end(kTinyCorpus));
  return text::train_sentencepiece(corpus, o);
}

}  // namespace chorus::breeze_tts
