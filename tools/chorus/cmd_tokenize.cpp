// chorus tokenize: text -> Qwen2 token ids, for checking the tokenizer against other implementations
// and for scripting. --text prints one JSON array; --jsonl reads one {"text": ...} object per line
// and prints one {"ids": [...]} line per input line, in order.
#include <nlohmann/json.hpp>

#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "command.h"
#include "text/qwen2_tokenizer.h"

namespace {

struct TokenizeOptions {
  std::string tokenizer_dir;
  std::string text;
  std::string jsonl_path;
};

void append_ids(const std::vector<std::int32_t>& ids, std::string* out) {
  out->push_back('[');
  char buf[16];
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out->append(", ");
    const auto r = std::to_chars(buf, buf + sizeof(buf), ids[i]);
    out->append(buf, r.ptr);
  }
  out->push_back(']');
}

bool write_all(const std::string& s) { return std::fwrite(s.data(), 1, s.size(), stdout) == s.size(); }

int run_jsonl(const chorus::text::Qwen2Tokenizer& tok, const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) return chorus::cli::fail(path + ": cannot open");
    in = &file;
  }
  std::string line, out;
  std::vector<std::int32_t> ids;
  std::size_t line_no = 0;
  while (std::getline(*in, line)) {
    ++line_no;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const auto text = j.is_object() ? j.find("text") : j.end();
    if (!j.is_object() || text == j.end() || !text->is_string()) {
      write_all(out);  // the lines before the bad one
      std::fflush(stdout);
      return chorus::cli::fail(path + ":" + std::to_string(line_no) + ": not a JSON object with a \"text\" string");
    }
    ids.clear();
    tok.encode(text->get_ref<const std::string&>(), &ids);
    out.append("{\"ids\": ");
    append_ids(ids, &out);
    out.append("}\n");
    if (out.size() > (1u << 20)) {
      if (!write_all(out)) return chorus::cli::fail("cannot write the output");
      out.clear();
    }
  }
  if (in->bad()) return chorus::cli::fail(path + ": read error");
  if (!write_all(out) || std::fflush(stdout) != 0) return chorus::cli::fail("cannot write the output");
  return 0;
}

chorus::cli::Runner setup_tokenize(CLI::App& sub) {
  auto opt = std::make_shared<TokenizeOptions>();
  sub.add_option("--tokenizer", opt->tokenizer_dir,
                 "Model or tokenizer folder (tokenizer.json, or vocab.json + merges.txt + tokenizer_config.json)")
      ->required();
  auto* text = sub.add_option("--text", opt->text, "Text to tokenize; prints the ids as one JSON array");
  auto* jsonl = sub.add_option("--jsonl", opt->jsonl_path,
                               "File ('-' for stdin) with one JSON object {\"text\": ...} per line; prints one "
                               "{\"ids\": [...]} line per input line");
  text->excludes(jsonl);
  jsonl->excludes(text);
  return [opt, text, jsonl] {
    if (text->count() == 0 && jsonl->count() == 0) return chorus::cli::fail("tokenize: give --text or --jsonl");
    auto tok = chorus::text::Qwen2Tokenizer::load(opt->tokenizer_dir);
    if (!tok) return chorus::cli::fail(tok.error());
    if (jsonl->count() > 0) return run_jsonl(*tok, opt->jsonl_path);
    std::string out;
    append_ids(tok->encode(opt->text), &out);
    out.push_back('\n');
    if (!write_all(out) || std::fflush(stdout) != 0) return chorus::cli::fail("cannot write the output");
    return 0;
  };
}

}  // namespace

CHORUS_COMMAND("tokenize", "Turn text into Qwen2 token ids (Qwen3-TTS text tokenizer)", setup_tokenize);
