#include "server/request_head.h"

#include <cctype>

#include <boost/beast/http/error.hpp>

#include "server/voice_store.h"

namespace chorus::server {

namespace http = boost::beast::http;

namespace {

constexpr std::string_view kVoicesPath = "/v1/audio/voices";

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char d = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return d == 0 && !b.empty();
}

ApiError method_not_allowed(const char* message) {
  return ApiError{405, message, "invalid_request_error", {}, "method_not_allowed"};
}

// The 405 for a method `e` does not take; the voices endpoints choose their work by method later.
std::optional<ApiError> method_refusal(Endpoint e, http::verb m) {
  const bool get = m == http::verb::get, head = m == http::verb::head;
  switch (e) {
    case Endpoint::kHealth:
    case Endpoint::kPlayground:
      if (!get && !head) return method_not_allowed("use GET");
      break;
    case Endpoint::kModels:
      if (!get) return method_not_allowed("use GET");
      break;
    case Endpoint::kSpeechStream:
      if (!get) return method_not_allowed("use GET (a WebSocket upgrade)");
      break;
    case Endpoint::kSpeech:
      if (m != http::verb::post) return method_not_allowed("use POST");
      break;
    case Endpoint::kVoices:
      if (!get && m != http::verb::post) return method_not_allowed("use GET or POST");
      break;
    case Endpoint::kVoice:
      if (!get && m != http::verb::delete_) return method_not_allowed("use GET or DELETE");
      break;
    case Endpoint::kReady:
    case Endpoint::kMetrics:
    case Endpoint::kUnknown:
      break;
  }
  return std::nullopt;
}

}  // namespace

Route route(http::verb method, std::string_view target) {
  Route r;
  const size_t q = target.find('?');
  r.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) r.query = std::string(target.substr(q + 1));
  const std::string& p = r.path;
  // The fixed paths first: the playground's files can never shadow them.
  if (p == "/health") r.endpoint = Endpoint::kHealth;
  else if (p == "/ready") r.endpoint = Endpoint::kReady;
  else if (p == "/metrics") r.endpoint = Endpoint::kMetrics;
  else if ((r.asset = find_playground_asset(p))) r.endpoint = Endpoint::kPlayground;
  else if (p == "/v1/models") r.endpoint = Endpoint::kModels;
  else if (p == "/v1/audio/speech/stream") r.endpoint = Endpoint::kSpeechStream;
  else if (p == "/v1/audio/speech") r.endpoint = Endpoint::kSpeech;
  else if (p == kVoicesPath) r.endpoint = Endpoint::kVoices;
  else if (p.size() > kVoicesPath.size() && p.compare(0, kVoicesPath.size(), kVoicesPath) == 0 && p[kVoicesPath.size()] == '/') {
    r.voice_id = p.substr(kVoicesPath.size() + 1);
    r.endpoint = r.voice_id.empty() ? Endpoint::kVoices : Endpoint::kVoice;
  }

  if (r.endpoint == Endpoint::kUnknown) {
    r.refusal = not_found("no such endpoint: " + p, {}, "unknown_url");
  } else if (r.endpoint == Endpoint::kVoice && !VoiceStore::valid_id(r.voice_id)) {
    // Ids are [A-Za-z0-9_-]: "..", "/" or percent-escapes never reach the voice folder.
    r.refusal = bad_request("invalid voice id", "voice_id", "invalid_voice_id");
  } else {
    r.refusal = method_refusal(r.endpoint, method);
  }
  return r;
}

const char* endpoint_label(Endpoint e) {
  switch (e) {
    case Endpoint::kHealth: return "health";
    case Endpoint::kReady: return "ready";
    case Endpoint::kMetrics: return "metrics";
    case Endpoint::kPlayground: return "playground";
    case Endpoint::kModels: return "models";
    case Endpoint::kSpeech: return "speech";
    case Endpoint::kSpeechStream: return "speech_stream";
    case Endpoint::kVoices:
    case Endpoint::kVoice: return "voices";
    case Endpoint::kUnknown: break;
  }
  return "unknown";
}

bool is_open(Endpoint e) {
  return e == Endpoint::kHealth || e == Endpoint::kReady || e == Endpoint::kMetrics || e == Endpoint::kPlayground;
}

std::optional<ApiError> check_api_key(const Route& r, std::string_view authorization, std::string_view api_key) {
  if (api_key.empty()) return std::nullopt;
  std::string auth(authorization);
  if (auth.empty() && r.endpoint == Endpoint::kSpeechStream)
    if (std::string key = query_param(r.query, "api_key"); !key.empty()) auth = "Bearer " + key;
  const std::string want = "Bearer " + std::string(api_key);
  if (constant_time_equal(auth, want)) return std::nullopt;
  return ApiError{401, auth.empty() ? "missing API key (Authorization: Bearer ...)" : "invalid API key", "invalid_request_error", {},
                  "invalid_api_key"};
}

std::string query_param(std::string_view query, std::string_view key) {
  size_t i = 0;
  while (i <= query.size()) {
    size_t amp = query.find('&', i);
    if (amp == std::string_view::npos) amp = query.size();
    const std::string_view part = query.substr(i, amp - i);
    if (part.size() > key.size() && part.substr(0, key.size()) == key && part[key.size()] == '=')
      return std::string(part.substr(key.size() + 1));
    i = amp + 1;
  }
  return {};
}

bool is_json_content_type(std::string_view ct) {
  std::string t(ct.substr(0, ct.find(';')));
  while (!t.empty() && t.back() == ' ') t.pop_back();
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return t == "application/json";
}

std::optional<HeadRefusal> refusal_for_parse_error(const boost::beast::error_code& ec) {
  if (ec == http::error::body_limit) return HeadRefusal{413, "the request body is too large"};
  if (ec == http::error::header_limit) return HeadRefusal{431, "the request headers are too large"};
  // The rest of Beast's HTTP errors are malformed messages, except a stream that ended (before or
  // inside a message): that client is gone, there is nobody to answer.
  if (ec.category() == http::make_error_code(http::error::bad_target).category() && ec != http::error::end_of_stream &&
      ec != http::error::partial_message)
    return HeadRefusal{400, "malformed HTTP request: " + ec.message()};
  return std::nullopt;
}

}  // namespace chorus::server
