#include "io/safetensors_header.h"

#include <algorithm>
#include <new>
#include <optional>

#include <nlohmann/json.hpp>

#include "io/json_util.h"

namespace chorus::io::detail {
namespace {

using Json = nlohmann::json;

// dtypes the safetensors format defines that chorus does not load: valid files, typed kUnsupported.
bool is_format_dtype(std::string_view name) {
  static constexpr std::string_view kOthers[] = {"U16",     "U32",      "U64",      "C64",
                                                 "F8_E4M3", "F8_E5M2",  "F8_E8M0",  "F4",
                                                 "F6_E2M3", "F6_E3M2"};
  return std::find(std::begin(kOthers), std::end(kOthers), name) != std::end(kOthers);
}

std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// SAX handler that accepts exactly the safetensors header schema and nothing else:
//   { "__metadata__": {str: str, ...}?, name: {"dtype": str, "shape": [uint...],
//     "data_offsets": [uint, uint]}, ... }
// Building TensorInfo directly (no DOM) keeps memory proportional to the tensor count, and any
// unexpected nesting is rejected at once, which bounds depth.
class HeaderSax {
 public:
  HeaderSax(ParsedHeader& out, const std::string& label, const SafetensorsLimits& limits)
      : out_(out), label_(label), limits_(limits) {}

  const std::optional<Error>& error() const { return error_; }
  const std::vector<uint64_t>& sizes() const { return sizes_; }
  bool finished() const { return where_ == Where::kDone; }

  bool null() { return unexpected("null"); }
  bool boolean(bool) { return unexpected("a boolean"); }
  bool binary(Json::binary_t&) { return unexpected("binary data"); }
  bool number_float(Json::number_float_t, const Json::string_t& text) {
    return unexpected("the number " + text);
  }
  bool number_integer(Json::number_integer_t v) {
    if (v < 0) return unexpected("the number " + std::to_string(v));
    return number_unsigned(static_cast<uint64_t>(v));
  }

  bool number_unsigned(Json::number_unsigned_t v) {
    if (where_ == Where::kShape) {
      if (v > static_cast<uint64_t>(INT64_MAX))
        return unexpected("the number " + std::to_string(v));
      if (cur_.shape.size() >= static_cast<size_t>(limits_.max_rank))
        return fail(ErrorCode::kUnsupported, tensor_prefix() + "rank above the maximum of " +
                                                 std::to_string(limits_.max_rank));
      cur_.shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (where_ == Where::kOffsets) {
      if (cur_.offsets.size() >= 2) return fail(tensor_prefix() + "'data_offsets' must hold exactly 2 integers");
      cur_.offsets.push_back(v);
      return true;
    }
    return unexpected("a number");
  }

  bool string(Json::string_t& v) {
    if (where_ == Where::kMetadata) {
      out_.metadata.emplace(std::move(key_), std::move(v));
      return true;
    }
    if (where_ == Where::kTensor && field_ == Field::kDtype) return set_dtype(v);
    return unexpected("a string");
  }

  bool start_object(std::size_t) {
    if (where_ == Where::kStart) {
      where_ = Where::kRoot;
      return true;
    }
    if (where_ == Where::kRoot) {
      if (key_ == "__metadata__") {
        where_ = Where::kMetadata;
        seen_metadata_ = true;
        return true;
      }
      cur_ = Pending{};
      cur_.name = std::move(key_);
      where_ = Where::kTensor;
      return true;
    }
    return unexpected("an object");
  }

  bool end_object() {
    switch (where_) {
      case Where::kRoot: where_ = Where::kDone; return true;
      case Where::kMetadata: where_ = Where::kRoot; return true;
      case Where::kTensor: return finish_tensor();
      default: return fail("internal: unbalanced object");
    }
  }

  bool start_array(std::size_t) {
    if (where_ == Where::kTensor && field_ == Field::kShape) {
      where_ = Where::kShape;
      return true;
    }
    if (where_ == Where::kTensor && field_ == Field::kOffsets) {
      where_ = Where::kOffsets;
      return true;
    }
    return unexpected("an array");
  }

  bool end_array() {
    if (where_ == Where::kOffsets && cur_.offsets.size() != 2)
      return fail(tensor_prefix() + "'data_offsets' must hold exactly 2 integers");
    where_ = Where::kTensor;
    return true;
  }

  bool key(Json::string_t& k) {
    if (where_ == Where::kRoot) {
      if (k == "__metadata__" ? seen_metadata_ : out_.index.count(k) != 0)
        return fail("duplicate key '" + k + "'");
      if (k != "__metadata__" && out_.infos.size() >= limits_.max_tensors)
        return fail(ErrorCode::kResourceExhausted,
                    "more than " + std::to_string(limits_.max_tensors) + " tensors");
      key_ = std::move(k);
      return true;
    }
    if (where_ == Where::kMetadata) {
      if (out_.metadata.count(k)) return fail("duplicate key '" + k + "' in __metadata__");
      key_ = std::move(k);
      return true;
    }
    // Inside a tensor entry.
    Field f;
    if (k == "dtype") f = Field::kDtype;
    else if (k == "shape") f = Field::kShape;
    else if (k == "data_offsets") f = Field::kOffsets;
    else return fail(tensor_prefix() + "unexpected field '" + k + "'");
    const unsigned bit = 1u << static_cast<int>(f);
    if (cur_.seen & bit) return fail(tensor_prefix() + "duplicate key '" + k + "'");
    cur_.seen |= bit;
    field_ = f;
    return true;
  }

  bool parse_error(std::size_t byte, const std::string&, const nlohmann::detail::exception& e) {
    std::string what = e.what();
    const size_t bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    return fail("header is not valid JSON at byte " + std::to_string(byte) + ": " + what);
  }

 private:
  enum class Where { kStart, kRoot, kMetadata, kTensor, kShape, kOffsets, kDone };
  enum class Field { kDtype, kShape, kOffsets };
  struct Pending {
    std::string name;
    std::optional<DType> dtype;
    Shape shape;
    std::vector<uint64_t> offsets;
    unsigned seen = 0;  // bit per Field
  };

  bool fail(std::string msg) { return fail(ErrorCode::kInvalidFormat, std::move(msg)); }
  bool fail(ErrorCode code, std::string msg) {
    if (!error_) error_ = make_error(code, label_ + ": " + std::move(msg));
    return false;
  }

  std::string tensor_prefix() const { return "tensor '" + cur_.name + "': "; }

  // A value of the wrong kind where the parser is; the message says what was expected there.
  bool unexpected(const std::string& f) {
    switch (where_) {
      case Where::kStart: return fail("header is not a JSON object");
      case Where::kRoot:
        if (key_ == "__metadata__") return fail("'__metadata__' must be an object, not " + f);
        return fail("tensor '" + key_ + "': expected an object, not " + f);
      case Where::kMetadata:
        return fail("__metadata__ '" + key_ + "': values must be strings, not " + f);
      case Where::kTensor:
        switch (field_) {
          case Field::kDtype: return fail(tensor_prefix() + "'dtype' must be a string, not " + f);
          case Field::kShape:
            return fail(tensor_prefix() + "'shape' must be an array of integers, not " + f);
          case Field::kOffsets:
            return fail(tensor_prefix() + "'data_offsets' must be an array of 2 integers, not " + f);
        }
        break;
      case Where::kShape:
        return fail(tensor_prefix() + "'shape' must hold non-negative integers, not " + f);
      case Where::kOffsets:
        return fail(tensor_prefix() + "'data_offsets' must hold non-negative integers, not " + f);
      case Where::kDone: break;
    }
    return fail("unexpected " + f);
  }

  bool set_dtype(const std::string& name) {
    if (auto dt = dtype_from_name(name)) {
      cur_.dtype = *dt;
      return true;
    }
    if (is_format_dtype(name))
      return fail(ErrorCode::kUnsupported, tensor_prefix() + "dtype " + name + " is not supported");
    return fail(tensor_prefix() + "unknown dtype '" + name + "'");
  }

  bool finish_tensor() {
    static constexpr std::pair<Field, const char*> kRequired[] = {
        {Field::kDtype, "dtype"}, {Field::kShape, "shape"}, {Field::kOffsets, "data_offsets"}};
    for (const auto& [f, name] : kRequired)
      if (!(cur_.seen & (1u << static_cast<int>(f))))
        return fail(tensor_prefix() + "missing '" + name + "'");
    // numel and byte size in checked 64-bit arithmetic: shapes come from the file.
    uint64_t numel = 1;
    for (int64_t d : cur_.shape) {
      auto n = checked_mul(numel, static_cast<uint64_t>(d));
      if (!n || *n > static_cast<uint64_t>(INT64_MAX))
        return fail(tensor_prefix() + "shape " + shape_to_string(cur_.shape) +
                    " has more elements than fit in 64 bits");
      numel = *n;
    }
    const std::optional<uint64_t> bytes = checked_mul(numel, dtype_size(*cur_.dtype));
    if (!bytes)
      return fail(tensor_prefix() + dtype_name(*cur_.dtype) + " " + shape_to_string(cur_.shape) +
                  " needs more bytes than fit in 64 bits");
    TensorInfo info;
    info.name = std::move(cur_.name);
    info.dtype = *cur_.dtype;
    info.shape = std::move(cur_.shape);
    info.begin = cur_.offsets[0];
    info.end = cur_.offsets[1];
    out_.index.emplace(info.name, out_.infos.size());
    out_.infos.push_back(std::move(info));
    sizes_.push_back(*bytes);
    where_ = Where::kRoot;
    return true;
  }

  ParsedHeader& out_;
  const std::string& label_;
  const SafetensorsLimits& limits_;
  Where where_ = Where::kStart;
  Field field_ = Field::kDtype;
  std::string key_;  // the pending root or metadata key
  bool seen_metadata_ = false;
  Pending cur_;
  std::vector<uint64_t> sizes_;  // byte size each tensor's dtype and shape require
  std::optional<Error> error_;
};

// The data section must be tiled exactly: each range as long as its tensor, in bounds, and the
// ranges sorted by offset contiguous from 0 to data_bytes (no gaps, overlaps or trailing bytes).
Status validate_offsets(ParsedHeader& h, const std::vector<uint64_t>& sizes, uint64_t data_bytes,
                        const std::string& label) {
  auto fail = [&](const TensorInfo& t, const std::string& msg) {
    return make_error(ErrorCode::kInvalidFormat, label + ": tensor '" + t.name + "': " + msg);
  };
  for (size_t i = 0; i < h.infos.size(); ++i) {
    const TensorInfo& t = h.infos[i];
    if (t.end < t.begin) return fail(t, "data offsets " + range_text(t.begin, t.end) + " are reversed");
    if (t.end - t.begin != sizes[i])
      return fail(t, "data offsets " + range_text(t.begin, t.end) + " but " + dtype_name(t.dtype) +
                         " " + shape_to_string(t.shape) + " needs " + std::to_string(sizes[i]) +
                         " bytes");
    if (t.end > data_bytes)
      return fail(t, "data offsets " + range_text(t.begin, t.end) + " run past the end of the " +
                         std::to_string(data_bytes) + "-byte data section (file truncated?)");
  }
  // Sorting in place (no second copy of the infos); names break ties between empty tensors at
  // the same offset, so the order is total and deterministic.
  std::sort(h.infos.begin(), h.infos.end(), [](const TensorInfo& x, const TensorInfo& y) {
    if (x.begin != y.begin) return x.begin < y.begin;
    if (x.end != y.end) return x.end < y.end;
    return x.name < y.name;
  });
  uint64_t expect = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : h.infos) {
    if (t.begin < expect)
      return fail(t, "data offsets " + range_text(t.begin, t.end) + " overlap tensor '" + prev->name +
                         "' " + range_text(prev->begin, prev->end));
    if (t.begin > expect)
      return fail(t, "data offsets " + range_text(t.begin, t.end) + " leave a gap of " +
                         std::to_string(t.begin - expect) + " unused bytes before them");
    expect = t.end;
    prev = &t;
  }
  if (expect != data_bytes)
    return make_error(ErrorCode::kInvalidFormat,
                      label + ": " + std::to_string(data_bytes - expect) +
                          " trailing bytes after the last tensor (data section is " +
                          std::to_string(data_bytes) + " bytes, tensors cover " +
                          std::to_string(expect) + ")");
  for (size_t i = 0; i < h.infos.size(); ++i) h.index.find(h.infos[i].name)->second = i;
  return ok_status();
}

}  // namespace

Result<ParsedHeader> parse_header(std::string_view header, uint64_t data_bytes,
                                  const std::string& label, const SafetensorsLimits& limits) {
  if (header.empty()) return make_error(ErrorCode::kInvalidFormat, label + ": header is empty");
  if (!is_valid_utf8(header))
    return make_error(ErrorCode::kInvalidFormat, label + ": header is not valid UTF-8");
  // nlohmann stops at a NUL byte as if the input ended there, which would let anything follow it.
  if (const size_t nul = header.find('\0'); nul != std::string_view::npos)
    return make_error(ErrorCode::kInvalidFormat,
                      label + ": header is not valid JSON: NUL byte at offset " + std::to_string(nul));
  // As the reference implementation does: the header must begin with the object itself.
  if (header[0] != '{')
    return make_error(ErrorCode::kInvalidFormat, label + ": header is not a JSON object");
  ParsedHeader out;
  try {
    // Reserving for the tensors the header appears to hold avoids holding two growing copies at
    // once; a miscount (escaped keys) only costs a reallocation.
    uint64_t guess = 0;
    for (size_t at = header.find("\"dtype\""); at != std::string_view::npos; at = header.find("\"dtype\"", at + 7))
      ++guess;
    out.infos.reserve(static_cast<size_t>(std::min<uint64_t>(guess, limits.max_tensors)));
    HeaderSax sax(out, label, limits);
    const bool ok = Json::sax_parse(header.begin(), header.end(), &sax);
    if (sax.error()) return *sax.error();
    if (!ok || !sax.finished())
      return make_error(ErrorCode::kInvalidFormat, label + ": header is not valid JSON");
    CHORUS_TRY(validate_offsets(out, sax.sizes(), data_bytes, label));
  } catch (const std::bad_alloc&) {
    return make_error(ErrorCode::kResourceExhausted, label + ": out of memory parsing the header");
  } catch (const std::exception& e) {
    return make_error(ErrorCode::kInvalidFormat, label + ": header is not valid JSON: " + e.what());
  }
  return out;
}

}  // namespace chorus::io::detail
