// Hostile tokenizer files: arbitrary bytes as tokenizer.json, or as vocab.json + merges.txt +
// tokenizer_config.json. Loading gives a tokenizer or an Error, never a crash, hang or unbounded
// allocation; a tokenizer that loads encodes and decodes within its id range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "text/qwen2_tokenizer.h"
#include "text/tokenizer_definition.h"

namespace {

// Splits at the first occurrence of `sep`, returning the head and leaving the tail in *rest.
std::string_view take(std::string_view* rest, std::string_view sep) {
  const std::size_t at = rest->find(sep);
  const std::string_view head = rest->substr(0, at);
  *rest = at == std::string_view::npos ? std::string_view() : rest->substr(at + sep.size());
  return head;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  chorus::Result<chorus::text::TokenizerDefinition> def = chorus::make_error(chorus::ErrorCode::kInternal, "");
  if (data[0] & 1) {
    def = chorus::text::parse_tokenizer_json(rest);
  } else {  // three files separated by "\n--\n"
    const std::string_view vocab = take(&rest, "\n--\n");
    const std::string_view merges = take(&rest, "\n--\n");
    def = chorus::text::parse_vocab_and_merges(vocab, merges, rest);
  }
  if (!def.ok()) return 0;
  auto tok = chorus::text::Qwen2Tokenizer::from_definition(*def);
  if (!tok.ok()) return 0;
  for (std::string_view text : {std::string_view("Hello, world! 你好 <|im_start|>x\n\n  y's 123"),
                                std::string_view(reinterpret_cast<const char*>(data), size < 256 ? size : 256)}) {
    const auto ids = tok->encode(text);
    for (std::int32_t id : ids) {
      if (id < 0 || id >= tok->id_limit()) std::abort();
    }
    (void)tok->decode(ids);
  }
  return 0;
}
