// Qwen2Tokenizer::encode/decode on arbitrary bytes with the real Qwen2 files: never crashes, ids
// stay in range, invalid UTF-8 tokenizes exactly like its repaired form, and for text without
// added-token markers decode(encode(x)) gives back NFC(repaired x).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "text/normalize.h"
#include "text/qwen2_tokenizer.h"
#include "text/utf8.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// shared/reference/qwen2_tokenizer, from $CHORUS_SHARED_DIR or next to the source tree.
std::string reference_dir() {
  if (const char* env = std::getenv("CHORUS_SHARED_DIR")) return std::string(env) + "/reference/qwen2_tokenizer";
  std::string here = __FILE__;  // .../tests/fuzz/fuzz_tokenizer.cpp
  for (int i = 0; i < 3; ++i) here = here.substr(0, here.find_last_of('/'));
  return here + "/../shared/reference/qwen2_tokenizer";
}

const chorus::text::Qwen2Tokenizer& tokenizer() {
  static const std::unique_ptr<chorus::text::Qwen2Tokenizer> tok = [] {
    const std::string dir = reference_dir();
    auto def = chorus::text::parse_vocab_and_merges(read_file(dir + "/vocab.json"), read_file(dir + "/merges.txt"),
                                                    read_file(dir + "/tokenizer_config.json"));
    if (!def.ok()) std::abort();  // the fuzzer needs the reference files
    auto t = chorus::text::Qwen2Tokenizer::from_definition(*def);
    if (!t.ok()) std::abort();
    return std::make_unique<chorus::text::Qwen2Tokenizer>(std::move(*t));
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& tok = tokenizer();
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto ids = tok.encode(input);
  for (std::int32_t id : ids) {
    if (id < 0 || id >= tok.id_limit()) std::abort();
  }
  const std::string repaired = chorus::text::to_valid_utf8(input);
  if (!chorus::text::is_valid_utf8(repaired)) std::abort();
  if (repaired != input && tok.encode(repaired) != ids) std::abort();
  const std::string decoded = tok.decode(ids);
  if (!chorus::text::is_valid_utf8(decoded)) std::abort();
  if (repaired.find('<') == std::string::npos) {  // every added token of Qwen2 starts with '<'
    std::string normalized;
    chorus::text::nfc(repaired, &normalized);
    if (decoded != normalized) std::abort();
  }
  return 0;
}
