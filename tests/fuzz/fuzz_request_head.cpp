// A request's head as chorus serve meets it, on arbitrary bytes: Beast's request parser with the
// server's header and body limits, fed in pieces as a socket delivers them, then what the server
// decides before an endpoint runs (request_head.h): the route and its refusal, the API key, the
// JSON and multipart content types, the WebSocket upgrade, and the answer to a refused head.
// Every input must end in a request or an answer of 400/413/431 or a silent close (never a crash,
// a hang or an exception), the same request whether the bytes come at once or in pieces, and a
// route that respects the API's rules; the same bytes also go to route() as a raw target.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "server/http_server.h"
#include "server/multipart.h"
#include "server/request_head.h"
#include "server/voice_store.h"

namespace {

namespace http = boost::beast::http;
using namespace chorus::server;

constexpr std::string_view kKey = "s3cret-key";

struct Parsed {
  std::optional<Request> req;        // a whole request
  boost::beast::error_code ec;       // else why not (need_more at the end: the client went quiet)
};

// Feeds `in` to a parser `piece` bytes at a time, keeping what it has not consumed for the next
// call as a socket read loop does. Stops at the first whole request (pipelined bytes stay unread).
Parsed parse(std::string_view in, size_t piece, const HttpOptions& o) {
  http::request_parser<http::string_body> p;
  p.header_limit(o.max_header_bytes);
  p.body_limit(o.max_body_bytes);
  Parsed out;
  std::string buf;
  size_t pos = 0;
  while (!p.is_done()) {
    if (pos == in.size()) {
      // The bytes are all in: a server would wait for more until its deadline, then close.
      if (!p.got_some() && buf.empty()) out.ec = http::error::end_of_stream;
      else p.put_eof(out.ec);
      if (!out.ec && !p.is_done()) out.ec = http::error::partial_message;
      break;
    }
    const size_t take = std::min(piece, in.size() - pos);
    buf.append(in.substr(pos, take));
    pos += take;
    for (;;) {
      boost::beast::error_code ec;
      const size_t n = p.put(boost::asio::buffer(buf.data(), buf.size()), ec);
      buf.erase(0, n);
      if (ec == http::error::need_more) break;
      if (ec) {
        out.ec = ec;
        return out;
      }
      if (p.is_done() || n == 0) break;
    }
  }
  if (!out.ec && p.is_done()) out.req = p.release();
  return out;
}

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

// A Content-Length value (digits only; leading zeros allowed).
std::optional<uint64_t> decimal(std::string_view s) {
  while (s.size() > 1 && s[0] == '0') s.remove_prefix(1);
  if (s.empty() || s.size() > 18) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

bool valid_id_chars(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  return true;
}

// The rules of the API (docs/server.md), checked against route() for any method and target.
void check_route(http::verb m, std::string_view target) {
  const Route r = route(m, target);
  const size_t q = target.find('?');
  if (r.path != target.substr(0, q)) std::abort();
  if (r.query != (q == std::string_view::npos ? std::string_view() : target.substr(q + 1))) std::abort();
  const std::string_view voices = "/v1/audio/voices/";
  const bool under_voices = r.path.size() > voices.size() && std::string_view(r.path).substr(0, voices.size()) == voices;
  switch (r.endpoint) {
    case Endpoint::kHealth: if (r.path != "/health") std::abort(); break;
    case Endpoint::kReady: if (r.path != "/ready") std::abort(); break;
    case Endpoint::kMetrics: if (r.path != "/metrics") std::abort(); break;
    case Endpoint::kPlayground: if (!r.asset || r.path.empty() || r.path[0] != '/') std::abort(); break;
    case Endpoint::kModels: if (r.path != "/v1/models") std::abort(); break;
    case Endpoint::kSpeech: if (r.path != "/v1/audio/speech") std::abort(); break;
    case Endpoint::kSpeechStream: if (r.path != "/v1/audio/speech/stream") std::abort(); break;
    case Endpoint::kVoices: if (r.path != "/v1/audio/voices" && r.path != voices) std::abort(); break;
    case Endpoint::kVoice:
      if (!under_voices || r.voice_id != r.path.substr(voices.size())) std::abort();
      // What reaches the voice store is a plain file name: no separators, dots or escapes.
      if (!r.refusal && (!valid_id_chars(r.voice_id) || !VoiceStore::valid_id(r.voice_id))) std::abort();
      if (valid_id_chars(r.voice_id) == (r.refusal && r.refusal->status == 400)) std::abort();
      break;
    case Endpoint::kUnknown:
      if (!r.refusal || r.refusal->status != 404 || under_voices) std::abort();
      break;
  }
  if (r.endpoint != Endpoint::kUnknown && r.endpoint != Endpoint::kPlayground && r.asset) std::abort();
  if (r.refusal) {
    const int s = r.refusal->status;
    if ((s != 400 && s != 404 && s != 405) || r.refusal->message.empty()) std::abort();
    const auto j = nlohmann::json::parse(r.refusal->to_json(), nullptr, false);
    if (j.is_discarded() || !j["error"]["message"].is_string()) std::abort();
  }
  // The methods each endpoint takes, listed here apart from route()'s own switch.
  if (!r.refusal || r.refusal->status == 405) {
    bool taken = true;
    const bool get = m == http::verb::get;
    switch (r.endpoint) {
      case Endpoint::kHealth:
      case Endpoint::kPlayground: taken = get || m == http::verb::head; break;
      case Endpoint::kModels:
      case Endpoint::kSpeechStream: taken = get; break;
      case Endpoint::kSpeech: taken = m == http::verb::post; break;
      case Endpoint::kVoices: taken = get || m == http::verb::post; break;
      case Endpoint::kVoice: taken = get || m == http::verb::delete_; break;
      default: break;
    }
    if (taken == static_cast<bool>(r.refusal)) std::abort();
  }
}

void check_request(const Request& req, const HttpOptions& o) {
  if (req.body().size() > o.max_body_bytes) std::abort();
  const std::string_view target = req.target();
  check_route(req.method(), target);
  const Route r = route(req.method(), target);

  // The key: the exact header passes; with no header, the WebSocket endpoint may carry it in the
  // query; nothing else passes. No key configured: everything passes.
  const std::string_view auth = req[http::field::authorization];
  if (check_api_key(r, auth, "")) std::abort();
  const bool passed = !check_api_key(r, auth, kKey);
  const bool exact = auth == "Bearer " + std::string(kKey);
  const bool via_query = auth.empty() && r.endpoint == Endpoint::kSpeechStream && query_param(r.query, "api_key") == kKey;
  if (passed != (exact || via_query)) std::abort();
  if (via_query && r.query.find("api_key=" + std::string(kKey)) == std::string::npos) std::abort();

  const std::string_view ct = req[http::field::content_type];
  if (is_json_content_type(ct) && lower(ct).rfind("application/json", 0) != 0) std::abort();
  if (auto b = multipart_boundary(ct)) {
    if (b->empty() || b->size() > 70 || lower(ct).find("multipart/form-data") == std::string::npos) std::abort();
  }
  // An upgrade needs HTTP/1.1, GET and both headers naming it.
  if (Responder::is_websocket_upgrade(req)) {
    if (req.version() < 11 || req.method() != http::verb::get) std::abort();
    if (lower(req[http::field::upgrade]).find("websocket") == std::string::npos) std::abort();
    if (lower(req[http::field::connection]).find("upgrade") == std::string::npos) std::abort();
  }
  // A body with a declared length has that length.
  if (!req.chunked() && req.has_content_length()) {
    const auto n = decimal(req[http::field::content_length]);
    if (!n || *n != req.body().size()) std::abort();
  }
}

bool same(const Request& a, const Request& b) {
  if (a.method_string() != b.method_string() || a.target() != b.target() || a.version() != b.version() || a.body() != b.body())
    return false;
  auto i = a.begin(), j = b.begin();
  for (; i != a.end() && j != b.end(); ++i, ++j)
    if (i->name_string() != j->name_string() || i->value() != j->value()) return false;
  return i == a.end() && j == b.end();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  HttpOptions o;
  o.max_header_bytes = 2048;  // small limits, so that inputs reach them
  o.max_body_bytes = 1024;
  // Pieces of a size drawn from the input, so the seeds stay plain HTTP.
  const size_t piece = 1 + size % 23;
  const Parsed whole = parse(in, in.size() + 1, o), split = parse(in, piece, o);
  for (const Parsed* p : {&whole, &split}) {
    if (p->req) {
      check_request(*p->req, o);
    } else {
      if (!p->ec) std::abort();
      if (auto a = refusal_for_parse_error(p->ec)) {
        if ((a->status != 400 && a->status != 413 && a->status != 431) || a->message.empty()) std::abort();
        if ((p->ec == http::error::header_limit) != (a->status == 431)) std::abort();
        if ((p->ec == http::error::body_limit) != (a->status == 413)) std::abort();
      }
    }
  }
  if (whole.req && split.req && !same(*whole.req, *split.req)) std::abort();
  // The raw bytes as a target (route() must hold up past what the parser lets through), with a
  // method picked from the input.
  const http::verb methods[] = {http::verb::get, http::verb::post, http::verb::delete_, http::verb::head, http::verb::put,
                                http::verb::unknown};
  check_route(methods[size % 6], in.substr(0, 4096));
  return 0;
}
