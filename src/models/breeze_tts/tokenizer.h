// The Breeze text tokenizer: Gemma 3's SentencePiece model plus the checkpoint's added tokens
// (<|AUDIO|>, <|audio_eos|>, [S0]..[S9], <ins_bos>, <ins_eos>, and <bos>/<eos>/<pad> as Hugging Face
// matches them in text), all at the ids config.json gives.
#pragma once

#include <string>
#include <vector>

#include "core/error.h"
#include "models/breeze_tts/config.h"
#include "text/sentencepiece_tokenizer.h"

namespace chorus::breeze_tts {

text::AddedTokens added_tokens(const Config& c);
Result<text::SentencePieceTokenizer> load_tokenizer(const std::string& model_path, const Config& c);

// Trains the small SentencePiece model make-tiny writes: a built-in English text, byte fallback, and
// pieces only below the lowest special id (so no piece collides with one), at most 1000 of them.
Result<std::string> train_tiny_tokenizer(const Config& c);

}  // namespace chorus::breeze_tts
