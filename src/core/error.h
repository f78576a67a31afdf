// Errors are values at the library boundary: nothing in src/ aborts or throws across its API on bad
// input. A function that can fail returns Status or Result<T>; the CLI turns an Error into one line
// on stderr and exit code 2.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace chorus {

enum class ErrorCode {
  kInvalidArgument,   // bad option, request or parameter value
  kNotFound,          // file, tensor, speaker, ... that does not exist
  kIo,                // the operating system refused a read or write
  kInvalidFormat,     // a file exists but its content is malformed
  kShapeMismatch,     // a tensor disagrees with what the config implies
  kUnsupported,       // valid but not (yet) handled by chorus
  kOutOfRange,        // a number outside its allowed range
  kResourceExhausted, // a size cap or memory budget was hit
  kCancelled,
  kInternal,          // a bug in chorus; the message says where
};

const char* error_code_name(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;

  // "invalid format: model.safetensors: tensor 'x' ..." : one line, ready for a user.
  std::string to_string() const;
};

inline Error make_error(ErrorCode code, std::string message) { return Error{code, std::move(message)}; }

// Result<T> holds either a value or an Error. Kept tiny on purpose: GCC 12 in C++20 has no
// std::expected.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const& { return error_; }
  Error&& error() && { return std::move(error_); }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;
inline Status ok_status() { return Status(); }

}  // namespace chorus

#define CHORUS_CONCAT_INNER(a, b) a##b
#define CHORUS_CONCAT(a, b) CHORUS_CONCAT_INNER(a, b)

// CHORUS_TRY(expr): return the error of a failed Status/Result.
#define CHORUS_TRY(expr)                                   \
  do {                                                     \
    auto&& chorus_try_r_ = (expr);                         \
    if (!chorus_try_r_.ok()) return std::move(chorus_try_r_).error(); \
  } while (0)

// CHORUS_ASSIGN(lhs, expr): lhs = value of a Result, or return its error.
#define CHORUS_ASSIGN(lhs, expr) CHORUS_ASSIGN_IMPL(CHORUS_CONCAT(chorus_r_, __LINE__), lhs, expr)
#define CHORUS_ASSIGN_IMPL(tmp, lhs, expr)           \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).error();      \
  lhs = std::move(tmp).value()
