#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace chorus::server {

std::string ApiError::to_json() const {
  nlohmann::json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  nlohmann::json j;
  j["error"] = std::move(e);
  // Messages may quote client bytes: invalid UTF-8 is replaced, never thrown on.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

ApiError not_found(std::string message, std::string param, std::string code) {
  return ApiError{404, std::move(message), "invalid_request_error", std::move(param), std::move(code)};
}

ApiError api_error_from(const Error& e, const std::string& param) {
  switch (e.code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kOutOfRange:
    case ErrorCode::kInvalidFormat:
    case ErrorCode::kShapeMismatch:
    case ErrorCode::kUnsupported:
      return bad_request(e.message, param);
    case ErrorCode::kNotFound:
      return not_found(e.message, param);
    case ErrorCode::kResourceExhausted:
      return bad_request(e.message, param, "too_large");
    case ErrorCode::kCancelled:
      return ApiError{503, e.message, "server_error", {}, "cancelled"};
    case ErrorCode::kIo:
    case ErrorCode::kInternal:
      break;
  }
  return ApiError{500, e.message, "server_error", {}, {}};
}

}  // namespace chorus::server
