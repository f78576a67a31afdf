#include "text/tokenizer_definition.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <limits>

namespace chorus::text {

const char kQwen2SplitRegex[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using nlohmann::json;

constexpr std::uintmax_t kMaxTokenizerJsonBytes = 64u << 20;
constexpr std::uintmax_t kMaxVocabBytes = 32u << 20;
constexpr std::uintmax_t kMaxMergesBytes = 32u << 20;
constexpr std::uintmax_t kMaxConfigBytes = 8u << 20;

Error bad(const std::string& what, const std::string& message) {
  return make_error(ErrorCode::kInvalidFormat, what + ": " + message);
}

Error unsupported(const std::string& what, const std::string& message) {
  return make_error(ErrorCode::kUnsupported, what + ": " + message);
}

// Deepest nesting of [ and { outside strings; stops counting once past the limit.
std::size_t json_depth(std::string_view text) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > kMaxJsonDepth) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

Result<json> parse_json(std::string_view text, const std::string& what) {
  if (json_depth(text) > kMaxJsonDepth) return bad(what, "JSON nested deeper than " + std::to_string(kMaxJsonDepth));
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad(what, "not valid JSON");
  return j;
}

std::optional<std::int32_t> as_token_id(const json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u <= static_cast<std::uint64_t>(kMaxTokenId)) return static_cast<std::int32_t>(u);
  } else if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (i >= 0 && i <= kMaxTokenId) return static_cast<std::int32_t>(i);
  }
  return std::nullopt;
}

// A boolean member, `fallback` when absent or null.
Result<bool> get_bool(const json& obj, const char* key, bool fallback, const std::string& what) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return bad(what, std::string("'") + key + "' is not a boolean");
  return it->get<bool>();
}

// A string member, "" when absent or null.
Result<std::string> get_string(const json& obj, const char* key, const std::string& what) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::string();
  if (!it->is_string()) return bad(what, std::string("'") + key + "' is not a string");
  return it->get<std::string>();
}

Result<std::vector<std::pair<std::string, std::int32_t>>> parse_vocab_object(const json& v, const std::string& what) {
  if (!v.is_object()) return bad(what, "the vocabulary is not a JSON object");
  if (v.size() > static_cast<std::size_t>(kMaxTokenId) + 1) return bad(what, "too many vocabulary entries");
  std::vector<std::pair<std::string, std::int32_t>> vocab;
  vocab.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    const auto id = as_token_id(it.value());
    if (!id) return bad(what, "token '" + it.key() + "' has an id that is not an integer in [0, " +
                                   std::to_string(kMaxTokenId) + "]");
    vocab.emplace_back(it.key(), *id);
  }
  return vocab;
}

// One added token as written in tokenizer.json's "added_tokens" or tokenizer_config.json's
// "added_tokens_decoder". Options we do not implement are refused rather than ignored.
Result<AddedTokenSpec> parse_added_token(const json& t, std::int32_t id, const std::string& what) {
  if (!t.is_object()) return bad(what, "an added token is not an object");
  AddedTokenSpec spec;
  spec.id = id;
  CHORUS_ASSIGN(spec.content, get_string(t, "content", what));
  if (spec.content.empty() || spec.content.size() > kMaxTokenBytes)
    return bad(what, "added token " + std::to_string(id) + " has an empty or over-long content");
  CHORUS_ASSIGN(spec.special, get_bool(t, "special", false, what));
  // Hugging Face's default: special tokens are matched in the raw text, others after normalising.
  CHORUS_ASSIGN(spec.normalized, get_bool(t, "normalized", !spec.special, what));
  for (const char* key : {"lstrip", "rstrip", "single_word"}) {
    CHORUS_ASSIGN(bool on, get_bool(t, key, false, what));
    if (on) return unsupported(what, "added token '" + spec.content + "' sets " + key);
  }
  return spec;
}

Result<std::vector<std::pair<std::string, std::string>>> parse_merges_txt(std::string_view text) {
  const std::string what = "merges.txt";
  std::vector<std::pair<std::string, std::string>> merges;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line_no == 1 && line.substr(0, 9) == "#version:") continue;
    const std::size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos)
      return bad(what, "line " + std::to_string(line_no) + " is not two tokens separated by one space");
    merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
  }
  return merges;
}

Result<std::vector<std::pair<std::string, std::string>>> parse_merges_json(const json& m, const std::string& what) {
  if (!m.is_array()) return bad(what, "model.merges is not an array");
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(m.size());
  for (std::size_t i = 0; i < m.size(); ++i) {
    const json& e = m[i];
    if (e.is_string()) {  // older layout: "a b"
      const std::string& s = e.get_ref<const std::string&>();
      const std::size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        return bad(what, "merge " + std::to_string(i) + " is not two tokens separated by one space");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      return bad(what, "merge " + std::to_string(i) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return merges;
}

bool has_type(const json& v, const char* type) {
  if (!v.is_object()) return false;
  auto it = v.find("type");
  return it != v.end() && it->is_string() && it->get_ref<const std::string&>() == type;
}

Status parse_normalizer(const json& root, TokenizerDefinition* def, const std::string& what) {
  auto it = root.find("normalizer");
  if (it == root.end() || it->is_null()) {
    def->nfc = false;
    return ok_status();
  }
  if (has_type(*it, "NFC")) return ok_status();
  if (has_type(*it, "Sequence")) {
    auto list = it->find("normalizers");
    if (list != it->end() && list->is_array() && list->size() == 1 && has_type((*list)[0], "NFC")) return ok_status();
  }
  return unsupported(what, "only an NFC normalizer (or none) is supported");
}

// Qwen2's layout: Sequence[Split(Regex, Isolated, invert false), ByteLevel(no prefix space, no regex)].
Status parse_pre_tokenizer(const json& root, TokenizerDefinition* def, const std::string& what) {
  const Error other = unsupported(what, "only the Qwen2 pre-tokenizer (Split regex, then ByteLevel) is supported");
  auto it = root.find("pre_tokenizer");
  if (it == root.end() || !has_type(*it, "Sequence")) return other;
  auto list = it->find("pretokenizers");
  if (list == it->end() || !list->is_array() || list->size() != 2) return other;
  const json& split = (*list)[0];
  const json& byte_level = (*list)[1];
  if (!has_type(split, "Split") || !has_type(byte_level, "ByteLevel")) return other;
  auto pattern = split.find("pattern");
  if (pattern == split.end() || !pattern->is_object()) return other;
  auto regex = pattern->find("Regex");
  if (regex == pattern->end() || !regex->is_string()) return other;
  CHORUS_ASSIGN(std::string behavior, get_string(split, "behavior", what));
  CHORUS_ASSIGN(bool invert, get_bool(split, "invert", false, what));
  CHORUS_ASSIGN(bool prefix_space, get_bool(byte_level, "add_prefix_space", false, what));
  CHORUS_ASSIGN(bool use_regex, get_bool(byte_level, "use_regex", true, what));
  if (behavior != "Isolated" || invert || prefix_space || use_regex) return other;
  def->split_regex = regex->get<std::string>();
  if (def->split_regex.empty() || def->split_regex.size() > kMaxRegexBytes)
    return bad(what, "the split regex is empty or longer than " + std::to_string(kMaxRegexBytes) + " bytes");
  return ok_status();
}

Status parse_bpe_model(const json& root, TokenizerDefinition* def, const std::string& what) {
  auto model = root.find("model");
  if (model == root.end() || !model->is_object()) return bad(what, "no model");
  if (model->contains("type") && !has_type(*model, "BPE")) return unsupported(what, "the model is not BPE");
  for (const char* key : {"dropout", "unk_token"}) {
    auto v = model->find(key);
    if (v != model->end() && !v->is_null()) return unsupported(what, std::string("model.") + key + " is set");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    CHORUS_ASSIGN(std::string s, get_string(*model, key, what));
    if (!s.empty()) return unsupported(what, std::string("model.") + key + " is set");
  }
  CHORUS_ASSIGN(bool byte_fallback, get_bool(*model, "byte_fallback", false, what));
  if (byte_fallback) return unsupported(what, "model.byte_fallback is set");
  CHORUS_ASSIGN(def->ignore_merges, get_bool(*model, "ignore_merges", false, what));
  auto vocab = model->find("vocab");
  auto merges = model->find("merges");
  if (vocab == model->end() || merges == model->end()) return bad(what, "model.vocab or model.merges is missing");
  CHORUS_ASSIGN(def->vocab, parse_vocab_object(*vocab, what));
  CHORUS_ASSIGN(def->merges, parse_merges_json(*merges, what));
  return ok_status();
}

Result<std::string> read_capped(const std::filesystem::path& path, std::uintmax_t max_bytes) {
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return make_error(ErrorCode::kNotFound, path.string() + ": " + ec.message());
  if (size > max_bytes)
    return make_error(ErrorCode::kResourceExhausted,
                      path.string() + ": larger than the " + std::to_string(max_bytes >> 20) + " MiB limit");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::kIo, path.string() + ": cannot open");
  std::string data(static_cast<std::size_t>(size), '\0');
  in.read(data.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::uintmax_t>(in.gcount()) != size) return make_error(ErrorCode::kIo, path.string() + ": short read");
  return data;
}

Result<TokenizerDefinition> parse_tokenizer_json_impl(std::string_view json_text) {
  const std::string what = "tokenizer.json";
  CHORUS_ASSIGN(json root, parse_json(json_text, what));
  if (!root.is_object()) return bad(what, "not a JSON object");
  for (const char* key : {"truncation", "padding"}) {
    auto v = root.find(key);
    if (v != root.end() && !v->is_null()) return unsupported(what, std::string(key) + " is set");
  }
  TokenizerDefinition def;
  CHORUS_TRY(parse_normalizer(root, &def, what));
  CHORUS_TRY(parse_pre_tokenizer(root, &def, what));
  if (!has_type(root.value("decoder", json()), "ByteLevel")) return unsupported(what, "the decoder is not ByteLevel");
  CHORUS_TRY(parse_bpe_model(root, &def, what));
  auto added = root.find("added_tokens");
  if (added != root.end() && !added->is_null()) {
    if (!added->is_array() || added->size() > kMaxAddedTokens) return bad(what, "added_tokens is not a bounded array");
    for (const json& t : *added) {
      const auto id = t.is_object() && t.contains("id") ? as_token_id(t["id"]) : std::nullopt;
      if (!id) return bad(what, "an added token has no valid id");
      CHORUS_ASSIGN(AddedTokenSpec spec, parse_added_token(t, *id, what));
      def.added_tokens.push_back(std::move(spec));
    }
  }
  return def;
}

Result<TokenizerDefinition> parse_vocab_and_merges_impl(std::string_view vocab_json, std::string_view merges_txt,
                                                        std::string_view config_json) {
  TokenizerDefinition def;
  {
    CHORUS_ASSIGN(json vocab, parse_json(vocab_json, "vocab.json"));
    CHORUS_ASSIGN(def.vocab, parse_vocab_object(vocab, "vocab.json"));
  }
  CHORUS_ASSIGN(def.merges, parse_merges_txt(merges_txt));
  const std::string what = "tokenizer_config.json";
  CHORUS_ASSIGN(json config, parse_json(config_json, what));
  if (!config.is_object()) return bad(what, "not a JSON object");
  // With split_special_tokens, transformers tokenizes special tokens as plain text.
  CHORUS_ASSIGN(bool split_special, get_bool(config, "split_special_tokens", false, what));
  auto decoder = config.find("added_tokens_decoder");
  if (decoder != config.end() && !decoder->is_null()) {
    if (!decoder->is_object() || decoder->size() > kMaxAddedTokens)
      return bad(what, "added_tokens_decoder is not a bounded object");
    for (auto it = decoder->begin(); it != decoder->end(); ++it) {
      const std::string& key = it.key();
      std::int64_t id = -1;
      if (!key.empty() && key.size() <= 9 && key.find_first_not_of("0123456789") == std::string::npos) id = std::stoll(key);
      if (id < 0 || id > kMaxTokenId) return bad(what, "added token id '" + key + "' is not a valid id");
      CHORUS_ASSIGN(AddedTokenSpec spec, parse_added_token(it.value(), static_cast<std::int32_t>(id), what));
      if (split_special && spec.special) continue;
      def.added_tokens.push_back(std::move(spec));
    }
  }
  return def;
}

}  // namespace

// The parsers run on untrusted bytes; nlohmann reports misuse by exceptions (e.g. a type error we
// failed to foresee), which must not escape as anything but an error value.
Result<TokenizerDefinition> parse_tokenizer_json(std::string_view json_text) {
  try {
    return parse_tokenizer_json_impl(json_text);
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::kResourceExhausted, "tokenizer.json: out of memory");
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInvalidFormat, std::string("tokenizer.json: ") + e.what());
  }
}

Result<TokenizerDefinition> parse_vocab_and_merges(std::string_view vocab_json, std::string_view merges_txt,
                                                   std::string_view tokenizer_config_json) {
  try {
    return parse_vocab_and_merges_impl(vocab_json, merges_txt, tokenizer_config_json);
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::kResourceExhausted, "tokenizer files: out of memory");
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInvalidFormat, std::string("tokenizer files: ") + e.what());
  }
}

Result<TokenizerDefinition> read_tokenizer_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return make_error(ErrorCode::kNotFound, dir + ": not a folder");
  const fs::path tokenizer_json = root / "tokenizer.json";
  if (fs::exists(tokenizer_json, ec)) {
    CHORUS_ASSIGN(std::string text, read_capped(tokenizer_json, kMaxTokenizerJsonBytes));
    return parse_tokenizer_json(text);
  }
  for (const char* name : {"vocab.json", "merges.txt", "tokenizer_config.json"}) {
    if (!fs::exists(root / name, ec))
      return make_error(ErrorCode::kNotFound,
                        dir + ": has neither tokenizer.json nor " + name + " (a tokenizer needs tokenizer.json, or "
                              "vocab.json + merges.txt + tokenizer_config.json)");
  }
  CHORUS_ASSIGN(std::string vocab, read_capped(root / "vocab.json", kMaxVocabBytes));
  CHORUS_ASSIGN(std::string merges, read_capped(root / "merges.txt", kMaxMergesBytes));
  CHORUS_ASSIGN(std::string config, read_capped(root / "tokenizer_config.json", kMaxConfigBytes));
  return parse_vocab_and_merges(vocab, merges, config);
}

}  // namespace chorus::text
