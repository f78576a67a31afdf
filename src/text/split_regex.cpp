#include "text/split_regex.h"

#include <oniguruma.h>

#include <mutex>

#include "text/utf8.h"

namespace chorus::text {
namespace {

// Bounds on the work one search may do, so that a hostile regex from a tokenizer.json cannot hang
// a request. The retry limit is Oniguruma's own default for one match; the search-wide limit is ours.
constexpr unsigned long kRetryLimitInMatch = 10'000'000;
constexpr unsigned long kRetryLimitInSearch = 50'000'000;

void initialize_oniguruma() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

// One region and match parameter block per thread, so searches allocate nothing.
struct ThreadScratch {
  OnigRegion* region = onig_region_new();
  OnigMatchParam* param = onig_new_match_param();
  ThreadScratch() {
    onig_initialize_match_param(param);
    onig_set_retry_limit_in_match_of_match_param(param, kRetryLimitInMatch);
    onig_set_retry_limit_in_search_of_match_param(param, kRetryLimitInSearch);
  }
  ~ThreadScratch() {
    onig_region_free(region, 1);
    onig_free_match_param(param);
  }
  ThreadScratch(const ThreadScratch&) = delete;
  ThreadScratch& operator=(const ThreadScratch&) = delete;
};

}  // namespace

struct SplitRegex::Compiled {
  regex_t* regex = nullptr;
  ~Compiled() {
    if (regex) onig_free(regex);
  }
};

Result<SplitRegex> SplitRegex::compile(const std::string& pattern) {
  initialize_oniguruma();
  auto compiled = std::make_shared<Compiled>();
  OnigErrorInfo info{};
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  const int rc = onig_new(&compiled->regex, p, p + pattern.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8,
                          ONIG_SYNTAX_RUBY, &info);
  if (rc != ONIG_NORMAL) {
    compiled->regex = nullptr;
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, rc, &info);
    return make_error(ErrorCode::kInvalidFormat,
                      std::string("split regex: ") + reinterpret_cast<const char*>(message));
  }
  SplitRegex r;
  r.compiled_ = std::move(compiled);
  return r;
}

SplitRegex::Found SplitRegex::search(std::string_view text, std::size_t from, std::size_t* begin,
                                     std::size_t* end) const {
  thread_local ThreadScratch scratch;
  const auto* s = reinterpret_cast<const OnigUChar*>(text.data());
  const OnigUChar* e = s + text.size();
  const int rc = onig_search_with_param(compiled_->regex, s, e, s + from, e, scratch.region, ONIG_OPTION_NONE,
                                        scratch.param);
  if (rc == ONIG_MISMATCH) return Found::kNone;
  if (rc < 0) return Found::kGaveUp;
  *begin = static_cast<std::size_t>(scratch.region->beg[0]);
  *end = static_cast<std::size_t>(scratch.region->end[0]);
  return Found::kMatch;
}

}  // namespace chorus::text
