#include "engine/text_feed.h"

namespace chorus::engine {

TextFeed::TextFeed(text::Qwen2Tokenizer tokenizer, std::string prefix, std::string suffix)
    : tokenizer_(std::move(tokenizer)), suffix_(std::move(suffix)) {
  tokenizer_.append(prefix, &ids_);
}

Status TextFeed::append(std::string_view delta) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return make_error(ErrorCode::kInvalidArgument, "text was added after the text was finished");
    const size_t before = ids_.size();
    tokenizer_.append(delta, &ids_);
    if (ids_.size() == before) return ok_status();
  }
  poke();
  return ok_status();
}

Status TextFeed::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return ok_status();
    tokenizer_.append(suffix_, &ids_);
    tokenizer_.finish(&ids_);
    finished_ = true;
  }
  poke();
  return ok_status();
}

void TextFeed::set_wake(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(mu_);
  wake_ = std::move(wake);
}

void TextFeed::poke() {
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake = wake_;
  }
  if (wake) wake();
}

void TextFeed::read(std::vector<int32_t>* ids, bool* finished) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (ids->size() < ids_.size()) ids->insert(ids->end(), ids_.begin() + static_cast<std::ptrdiff_t>(ids->size()), ids_.end());
  *finished = finished_;
}

int64_t TextFeed::released() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(ids_.size());
}

}  // namespace chorus::engine
