#include "text/tokenizer_fixture.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/test_support.h"

namespace chorus::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ref(const std::string& name) { return reference_path("qwen2_tokenizer/" + name); }

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// tokenizer_config.json's added_tokens_decoder with the assumed Qwen3-TTS tokens added.
json qwen3_tts_config() {
  json config = json::parse(read_text(ref("tokenizer_config.json")));
  const json assumed = json::parse(read_text(ref("qwen3_tts_added_tokens.assumed.json")));
  for (const json& t : assumed.at("tokens")) {
    config["added_tokens_decoder"][std::to_string(t.at("id").get<int>())] = {
        {"content", t.at("content")}, {"lstrip", false}, {"normalized", false},
        {"rstrip", false},            {"single_word", false}, {"special", t.at("special")}};
  }
  return config;
}

}  // namespace

std::vector<GoldenLine> read_golden(const std::string& name) {
  {
    std::vector<GoldenLine> out;
    std::ifstream in(ref(name), std::ios::binary);
    std::string line;
    while (std::getline(in, line)) {
      const json j = json::parse(line);
      out.push_back({j.at("text"), j.at("ids").get<std::vector<std::int32_t>>(), j.at("decoded"), j.at("cat")});
    }
    return out;
  }
}

const std::vector<GoldenLine>& golden_lines() {
  static const std::vector<GoldenLine> lines = read_golden("golden.jsonl");
  return lines;
}

const std::vector<GoldenLine>& mistral_fix_golden_lines() {
  static const std::vector<GoldenLine> lines = read_golden("golden_fix_mistral_regex.jsonl");
  return lines;
}

const std::string& qwen3_tts_tokenizer_folder() {
  static const std::string dir = [] {
    const std::string d = scratch_dir("qwen3_tts_tokenizer");
    fs::copy_file(ref("vocab.json"), d + "/vocab.json");
    fs::copy_file(ref("merges.txt"), d + "/merges.txt");
    write_text(d + "/tokenizer_config.json", qwen3_tts_config().dump());
    return d;
  }();
  return dir;
}

std::string write_tokenizer_json_folder(const std::string& name, const std::string& regex) {
  {
    const std::string d = scratch_dir(name);
    json added = json::array();
    const json config = qwen3_tts_config();
    for (const auto& [id, t] : config.at("added_tokens_decoder").items()) {
      json entry = t;
      entry["id"] = std::stoi(id);
      added.push_back(entry);
    }
    json merges = json::array();
    std::istringstream lines(read_text(ref("merges.txt")));
    std::string line;
    while (std::getline(lines, line)) {
      if (!line.empty()) merges.push_back(line);
    }
    const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
    json split;
    split["type"] = "Split";
    split["pattern"]["Regex"] = regex;
    split["behavior"] = "Isolated";
    split["invert"] = false;
    json tokenizer;
    tokenizer["version"] = "1.0";
    tokenizer["truncation"] = nullptr;
    tokenizer["padding"] = nullptr;
    tokenizer["added_tokens"] = added;
    tokenizer["normalizer"]["type"] = "NFC";
    tokenizer["pre_tokenizer"]["type"] = "Sequence";
    tokenizer["pre_tokenizer"]["pretokenizers"] = json::array({split, byte_level});
    tokenizer["post_processor"] = byte_level;
    tokenizer["decoder"] = byte_level;
    json& model = tokenizer["model"];
    model["type"] = "BPE";
    model["dropout"] = nullptr;
    model["unk_token"] = nullptr;
    model["continuing_subword_prefix"] = "";
    model["end_of_word_suffix"] = "";
    model["fuse_unk"] = false;
    model["byte_fallback"] = false;
    model["ignore_merges"] = false;
    model["vocab"] = json::parse(read_text(ref("vocab.json")));
    model["merges"] = merges;
    write_text(d + "/tokenizer.json", tokenizer.dump());
    return d;
  }
}

// The regexes are spelled out from the README rather than taken from our code.
const std::string& tokenizer_json_folder() {
  static const std::string dir = write_tokenizer_json_folder(
      "qwen2_tokenizer_json",
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  return dir;
}

const std::string& mistral_fix_tokenizer_json_folder() {
  static const std::string dir = write_tokenizer_json_folder(
      "qwen2_tokenizer_json_mistral_fix",
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  return dir;
}

const text::Qwen2Tokenizer* qwen3_tts_tokenizer() {
  static const Result<text::Qwen2Tokenizer> tok = text::Qwen2Tokenizer::load(qwen3_tts_tokenizer_folder());
  if (!tok.ok()) {
    ADD_FAILURE() << tok.error().to_string();
    return nullptr;
  }
  return &tok.value();
}

}  // namespace chorus::test
