#include "text/sentencepiece_tokenizer.h"

#include <map>
#include <unordered_map>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "io/file_util.h"
#include "text/added_tokens.h"
#include "text/utf8.h"

// Exported by libsentencepiece (spm_train's --minloglevel sets it) but not declared in its public
// headers; used to keep the trainer's progress log off stderr.
namespace sentencepiece::logging {
int GetMinLogLevel();
void SetMinLogLevel(int level);
}  // namespace sentencepiece::logging

namespace chorus::text {

namespace {

constexpr std::uint64_t kMaxModelBytes = 64ull << 20;  // Gemma 3's model is ~4.5 MB

}  // namespace

struct SentencePieceTokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
  AddedTokenMatcher matcher;
  std::map<std::int32_t, std::string> added_by_id;
  std::map<std::string, std::int32_t, std::less<>> added_by_text;
  std::int32_t pieces = 0;

  // Calls piece(begin, end) for each stretch of plain text and added(id, text) for each added token.
  template <class Plain, class Added>
  void split(std::string_view text, Plain&& plain, Added&& added) const {
    std::size_t pos = 0;
    while (pos < text.size()) {
      const auto m = matcher.empty() ? std::nullopt : matcher.find(text, pos);
      const std::size_t stop = m ? m->begin : text.size();
      if (stop > pos) plain(text.substr(pos, stop - pos));
      if (!m) break;
      added(m->id, text.substr(m->begin, m->end - m->begin));
      pos = m->end;
    }
  }
};

Result<SentencePieceTokenizer> SentencePieceTokenizer::from_serialized(std::string_view proto, const std::string& label,
                                                                       AddedTokens added) {
  auto impl = std::make_shared<Impl>();
  const auto st = impl->sp.LoadFromSerializedProto(proto);
  if (!st.ok()) return make_error(ErrorCode::kInvalidFormat, label + ": not a SentencePiece model: " + st.ToString());
  impl->pieces = impl->sp.GetPieceSize();
  for (const auto& [text, id] : added) {
    if (id < 0) return make_error(ErrorCode::kInvalidArgument, label + ": added token \"" + text + "\" has a negative id");
    if (text.empty() || !is_valid_utf8(text))
      return make_error(ErrorCode::kInvalidArgument, label + ": an added token is empty or not valid UTF-8");
    if (!impl->added_by_text.emplace(text, id).second)
      return make_error(ErrorCode::kInvalidArgument, label + ": added token \"" + text + "\" is listed twice");
    impl->added_by_id[id] = text;
  }
  impl->matcher = AddedTokenMatcher(std::move(added));
  SentencePieceTokenizer tok;
  tok.impl_ = std::move(impl);
  return tok;
}

Result<SentencePieceTokenizer> SentencePieceTokenizer::load(const std::string& model_path, AddedTokens added) {
  CHORUS_ASSIGN(std::string bytes, io::read_file_capped(model_path, kMaxModelBytes));
  return from_serialized(bytes, model_path, std::move(added));
}

std::vector<std::int32_t> SentencePieceTokenizer::encode(std::string_view raw) const {
  const std::string text = is_valid_utf8(raw) ? std::string(raw) : to_valid_utf8(raw);
  std::vector<std::int32_t> out;
  std::vector<int> ids;
  impl_->split(
      text,
      [&](std::string_view plain) {
        ids.clear();
        // Valid UTF-8 cannot make Encode fail; a failure would leave `ids` empty.
        impl_->sp.Encode(plain, &ids).IgnoreError();
        out.insert(out.end(), ids.begin(), ids.end());
      },
      [&](std::int32_t id, std::string_view) { out.push_back(id); });
  return out;
}

std::vector<std::string> SentencePieceTokenizer::encode_pieces(std::string_view raw) const {
  const std::string text = is_valid_utf8(raw) ? std::string(raw) : to_valid_utf8(raw);
  std::vector<std::string> out, pieces;
  impl_->split(
      text,
      [&](std::string_view plain) {
        pieces.clear();
        impl_->sp.Encode(plain, &pieces).IgnoreError();
        out.insert(out.end(), pieces.begin(), pieces.end());
      },
      [&](std::int32_t, std::string_view t) { out.emplace_back(t); });
  return out;
}

std::string SentencePieceTokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string out, part;
  std::vector<int> run;
  auto flush = [&] {
    if (run.empty()) return;
    part.clear();
    impl_->sp.Decode(run, &part).IgnoreError();
    out += part;
    run.clear();
  };
  for (const std::int32_t id : ids) {
    auto it = impl_->added_by_id.find(id);
    if (it != impl_->added_by_id.end()) {
      flush();
      out += it->second;
    } else if (id >= 0 && id < impl_->pieces) {
      run.push_back(id);
    }
  }
  flush();
  return out;
}

std::int32_t SentencePieceTokenizer::piece_count() const { return impl_->pieces; }

std::optional<std::int32_t> SentencePieceTokenizer::token_id(std::string_view token) const {
  auto it = impl_->added_by_text.find(token);
  if (it != impl_->added_by_text.end()) return it->second;
  const int id = impl_->sp.PieceToId(token);
  // PieceToId answers unk_id for unknown pieces; only the unknown piece itself maps there honestly.
  if (impl_->sp.IsUnknown(id) && impl_->sp.IdToPiece(id) != token) return std::nullopt;
  return id;
}

namespace {

class VectorSentences : public sentencepiece::SentenceIterator {
 public:
  explicit VectorSentences(const std::vector<std::string>& s) : s_(s) {}
  bool done() const override { return i_ >= s_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return s_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& s_;
  std::size_t i_ = 0;
};

}  // namespace

Result<std::string> train_sentencepiece(const std::vector<std::string>& sentences, const SentencePieceTrainOptions& o) {
  if (sentences.empty()) return make_error(ErrorCode::kInvalidArgument, "train_sentencepiece: no training text");
  if (o.model_type != "bpe" && o.model_type != "unigram")
    return make_error(ErrorCode::kInvalidArgument, "train_sentencepiece: model_type must be bpe or unigram");
  std::string symbols;
  for (const auto& s : o.user_defined_symbols) {
    if (s.empty() || s.find(',') != std::string::npos || !is_valid_utf8(s))
      return make_error(ErrorCode::kInvalidArgument, "train_sentencepiece: bad user-defined symbol \"" + s + "\"");
    symbols += (symbols.empty() ? "" : ",") + s;
  }
  std::unordered_map<std::string, std::string> args = {
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"hard_vocab_limit", o.hard_vocab_limit ? "true" : "false"},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"pad_id", std::to_string(o.pad_id)},
      {"eos_id", std::to_string(o.eos_id)},
      {"bos_id", std::to_string(o.bos_id)},
      {"unk_id", std::to_string(o.unk_id)},
      {"character_coverage", "1.0"},
      {"split_digits", "true"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"normalization_rule_name", "identity"},
      {"allow_whitespace_only_pieces", "true"},
      {"num_threads", "1"},  // deterministic
  };
  if (!symbols.empty()) args["user_defined_symbols"] = symbols;
  VectorSentences it(sentences);
  std::string model;
  const int log_level = sentencepiece::logging::GetMinLogLevel();
  sentencepiece::logging::SetMinLogLevel(2);  // errors only
  const auto st = sentencepiece::SentencePieceTrainer::Train(args, &it, &model);
  sentencepiece::logging::SetMinLogLevel(log_level);
  if (!st.ok()) return make_error(ErrorCode::kInvalidArgument, "SentencePiece training failed: " + st.ToString());
  return model;
}

}  // namespace chorus::text
