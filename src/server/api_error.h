// The errors the HTTP API answers with, in OpenAI's envelope:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "voice", "code": null}}
// Client mistakes are 4xx and name the field; 5xx only for faults of the server itself.
#pragma once

#include <string>

#include "core/error.h"

namespace chorus::server {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null

  std::string to_json() const;
};

ApiError bad_request(std::string message, std::string param = {}, std::string code = {});
ApiError not_found(std::string message, std::string param = {}, std::string code = {});
// An engine error on a request the server accepted: client-side codes (bad argument, not found,
// out of range, unsupported, too large) stay 4xx naming `param`; the rest are 500.
ApiError api_error_from(const Error& e, const std::string& param = {});

}  // namespace chorus::server
