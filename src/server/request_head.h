// What the server decides from a request's head before any endpoint runs: which endpoint the
// target names (and the voice id inside it), whether that endpoint takes the method, whether the
// request carries the API key, whether a body is declared as JSON, and what the connection answers
// when the HTTP parser refuses a head or body. Pure functions of the head's bytes, so they can be
// fuzzed (tests/fuzz/fuzz_request_head.cpp) and tested without a socket.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/verb.hpp>

#include "server/api_error.h"
#include "server/playground.h"

namespace chorus::server {

enum class Endpoint {
  kHealth,        // /health
  kReady,         // /ready
  kMetrics,       // /metrics
  kPlayground,    // / and the page's files
  kModels,        // /v1/models
  kSpeech,        // /v1/audio/speech
  kSpeechStream,  // /v1/audio/speech/stream
  kVoices,        // /v1/audio/voices (and /v1/audio/voices/)
  kVoice,         // /v1/audio/voices/{id}
  kUnknown,
};

struct Route {
  Endpoint endpoint = Endpoint::kUnknown;
  std::string path;      // the target before the first '?'
  std::string query;     // after it; empty when there is none
  std::string voice_id;  // kVoice: everything after /v1/audio/voices/, not decoded
  const PlaygroundAsset* asset = nullptr;  // kPlayground
  // The answer when the endpoint must not run: 404 for an unknown path, 400 for a malformed voice
  // id, 405 for a method the endpoint does not take. Given after the API key check, except for
  // the open endpoints.
  std::optional<ApiError> refusal;
};

Route route(boost::beast::http::verb method, std::string_view target);

// The endpoint's label in the metrics ("health", "speech", "voices", ...).
const char* endpoint_label(Endpoint e);
// Answered without the API key: probes, scrapers, and the playground page (which asks for the key
// itself).
bool is_open(Endpoint e);

// 401 when `api_key` is set and the request does not carry it as "Authorization: Bearer KEY".
// The WebSocket endpoint also takes ?api_key=KEY, since browsers cannot set headers there. The
// comparison takes the same time wherever the key differs.
std::optional<ApiError> check_api_key(const Route& r, std::string_view authorization, std::string_view api_key);

// The value of the first `key=` in a query string, not percent-decoded; empty when absent.
std::string query_param(std::string_view query, std::string_view key);

// Whether a Content-Type names application/json (any case, parameters such as charset allowed).
bool is_json_content_type(std::string_view content_type);

struct HeadRefusal {
  int status = 400;
  std::string message;
};
// What the connection answers when the HTTP parser stops with `ec` (413 for a body over the
// limit, 431 for headers over it, 400 for a malformed message); nullopt when it closes without an
// answer (the client went away or stopped mid-message).
std::optional<HeadRefusal> refusal_for_parse_error(const boost::beast::error_code& ec);

}  // namespace chorus::server
