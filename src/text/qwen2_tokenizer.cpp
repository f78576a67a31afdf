#include "text/qwen2_tokenizer.h"

#include "io/model_dir.h"
#include "text/added_tokens.h"
#include "text/bpe_model.h"
#include "text/normalize.h"
#include "text/piece_cache.h"
#include "text/split_regex.h"
#include "text/utf8.h"

namespace chorus::text {

struct Qwen2Tokenizer::Impl {
  BpeModel model;
  SplitRegex split;
  AddedTokenMatcher raw_tokens;         // matched before normalisation
  AddedTokenMatcher normalized_tokens;  // matched in each normalised stretch
  bool apply_nfc = true;
  std::string split_pattern;
  std::vector<std::string> added_token_texts;
  PieceCache cache;

  Impl(BpeModel m, SplitRegex s) : model(std::move(m)), split(std::move(s)) {}

  void encode_piece(std::string_view piece, std::vector<std::int32_t>* ids) const {
    const bool cacheable = piece.size() <= PieceCache::kMaxPieceBytes;
    if (cacheable && cache.lookup(piece, ids)) return;
    const std::size_t before = ids->size();
    model.encode_piece(piece, ids);
    if (cacheable) cache.insert(piece, ids->data() + before, ids->size() - before);
  }

  void encode_plain(std::string_view text, std::vector<std::int32_t>* ids) const {
    split.split(text, [&](std::size_t begin, std::size_t end) { encode_piece(text.substr(begin, end - begin), ids); });
  }

  // Text between raw-matched added tokens: normalise, then split on normalised added tokens.
  void encode_stretch(std::string_view text, std::vector<std::int32_t>* ids) const {
    std::string normalized;
    if (apply_nfc && !is_certainly_nfc(text)) {
      nfc(text, &normalized);
      text = normalized;
    }
    for_each_part(normalized_tokens, text, ids, [&](std::string_view part) { encode_plain(part, ids); });
  }

  template <class OnText>
  static void for_each_part(const AddedTokenMatcher& tokens, std::string_view text, std::vector<std::int32_t>* ids,
                            OnText&& on_text) {
    std::size_t pos = 0;
    while (pos < text.size()) {
      const auto match = tokens.find(text, pos);
      const std::size_t stop = match ? match->begin : text.size();
      if (stop > pos) on_text(text.substr(pos, stop - pos));
      if (!match) break;
      ids->push_back(match->id);
      pos = match->end;
    }
  }
};

Result<Qwen2Tokenizer> Qwen2Tokenizer::load(const std::string& spec) {
  CHORUS_ASSIGN(const std::string dir, io::resolve_model_dir(spec));
  CHORUS_ASSIGN(TokenizerDefinition def, read_tokenizer_folder(dir));
  return from_definition(def);
}

Result<Qwen2Tokenizer> Qwen2Tokenizer::from_definition(const TokenizerDefinition& def) {
  CHORUS_ASSIGN(BpeModel model, BpeModel::build(def));
  CHORUS_ASSIGN(SplitRegex split, SplitRegex::compile(def.split_regex));
  auto impl = std::make_shared<Impl>(std::move(model), std::move(split));
  impl->apply_nfc = def.nfc;
  impl->split_pattern = def.split_regex;
  for (const AddedTokenSpec& t : def.added_tokens) impl->added_token_texts.push_back(t.content);
  std::vector<std::pair<std::string, std::int32_t>> raw, normalized;
  for (const AddedTokenSpec& t : def.added_tokens) (t.normalized ? normalized : raw).emplace_back(t.content, t.id);
  impl->raw_tokens = AddedTokenMatcher(std::move(raw));
  impl->normalized_tokens = AddedTokenMatcher(std::move(normalized));
  Qwen2Tokenizer tok;
  tok.impl_ = std::move(impl);
  return tok;
}

std::vector<std::int32_t> Qwen2Tokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> ids;
  encode(text, &ids);
  return ids;
}

void Qwen2Tokenizer::encode(std::string_view text, std::vector<std::int32_t>* ids) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = to_valid_utf8(text);
    text = repaired;
  }
  const Impl& impl = *impl_;
  Impl::for_each_part(impl.raw_tokens, text, ids, [&](std::string_view part) { impl.encode_stretch(part, ids); });
}

std::string Qwen2Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string bytes;
  for (std::int32_t id : ids) {
    const std::string_view b = impl_->model.decoded_bytes(id);
    bytes.append(b.data(), b.size());
  }
  if (is_valid_utf8(bytes)) return bytes;
  return to_valid_utf8(bytes);
}

std::optional<std::int32_t> Qwen2Tokenizer::token_id(std::string_view token) const { return impl_->model.token_id(token); }

std::int32_t Qwen2Tokenizer::id_limit() const { return impl_->model.id_limit(); }

const std::string& Qwen2Tokenizer::split_pattern() const { return impl_->split_pattern; }

const std::vector<std::string>& Qwen2Tokenizer::added_token_texts() const { return impl_->added_token_texts; }

}  // namespace chorus::text
