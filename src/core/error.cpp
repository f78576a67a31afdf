#include "core/error.h"

namespace chorus {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kIo: return "i/o error";
    case ErrorCode::kInvalidFormat: return "invalid format";
    case ErrorCode::kShapeMismatch: return "shape mismatch";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kOutOfRange: return "out of range";
    case ErrorCode::kResourceExhausted: return "resource exhausted";
    case ErrorCode::kCancelled: return "cancelled";
    case ErrorCode::kInternal: return "internal error";
  }
  return "error";
}

std::string Error::to_string() const { return std::string(error_code_name(code)) + ": " + message; }

}  // namespace chorus
