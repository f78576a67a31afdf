// Text that arrives while its request runs (an LLM's output, token by token): a writer on any
// thread appends deltas and finishes; the stream that speaks it reads the ids released so far.
// Deltas are tokenized on the writer's thread, exactly (text/incremental_tokenizer.h): the ids
// read, once the text is finished, are tokenize(prefix + all deltas + suffix).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "text/incremental_tokenizer.h"

namespace chorus::engine {

class TextFeed {
 public:
  // `prefix` is written at once; `suffix` when the text is finished (the model's wrapping).
  TextFeed(text::Qwen2Tokenizer tokenizer, std::string prefix, std::string suffix);

  // Writer side, any thread. After finish() more text is refused (kInvalidArgument).
  Status append(std::string_view delta);
  Status finish();
  // Called, outside the feed's lock, after new ids or the end of the text arrived (and by poke()).
  void set_wake(std::function<void()> wake);
  void poke();

  // Reader side: appends the ids released beyond the ids->size() already read; *finished: the
  // text is complete and every id has been released.
  void read(std::vector<int32_t>* ids, bool* finished) const;
  int64_t released() const;

 private:
  mutable std::mutex mu_;
  text::IncrementalTokenizer tokenizer_;
  std::string suffix_;
  std::vector<int32_t> ids_;
  bool finished_ = false;
  std::function<void()> wake_;
};

}  // namespace chorus::engine
