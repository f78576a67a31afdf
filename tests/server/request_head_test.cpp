// The decisions the server takes from a request's head alone (request_head.h), against the API as
// docs/server.md and docs/websocket.md describe it: the endpoint table, the methods each takes, voice ids that could
// reach outside the voices folder, the API key in the header or (WebSocket only) the query, the
// JSON content type, and the answers to heads the HTTP parser refuses.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <nlohmann/json.hpp>

#include "server/request_head.h"

namespace chorus::server {
namespace {

namespace http = boost::beast::http;
using http::verb;

int refusal_status(const Route& r) { return r.refusal ? r.refusal->status : 0; }

TEST(RequestHead, EachEndpointByPath) {
  struct Case {
    verb method;
    const char* target;
    Endpoint endpoint;
  };
  const Case cases[] = {
      {verb::get, "/health", Endpoint::kHealth},
      {verb::get, "/ready", Endpoint::kReady},
      {verb::get, "/metrics", Endpoint::kMetrics},
      {verb::get, "/", Endpoint::kPlayground},
      {verb::get, "/v1/models", Endpoint::kModels},
      {verb::post, "/v1/audio/speech", Endpoint::kSpeech},
      {verb::get, "/v1/audio/speech/stream", Endpoint::kSpeechStream},
      {verb::get, "/v1/audio/voices", Endpoint::kVoices},
      {verb::post, "/v1/audio/voices", Endpoint::kVoices},
      {verb::get, "/v1/audio/voices/", Endpoint::kVoices},
      {verb::get, "/v1/audio/voices/voice_1", Endpoint::kVoice},
      {verb::delete_, "/v1/audio/voices/voice_1", Endpoint::kVoice},
  };
  for (const Case& c : cases) {
    const Route r = route(c.method, c.target);
    EXPECT_EQ(r.endpoint, c.endpoint) << c.target;
    EXPECT_FALSE(r.refusal) << c.target << ": " << r.refusal->message;
  }
  EXPECT_EQ(route(verb::get, "/v1/audio/voices/Abc-1_z").voice_id, "Abc-1_z");
  const Route page = route(verb::get, "/");
  ASSERT_NE(page.asset, nullptr);
  EXPECT_EQ(std::string(page.asset->content_type).rfind("text/html", 0), 0u);
  EXPECT_FALSE(page.asset->body.empty());
}

TEST(RequestHead, UnknownPathsAre404) {
  for (const char* t : {"/v1/audio/voicesX", "/v1/models/", "/HEALTH", "/health/", "", "?", "/v1/audio", "/v1/audio/speech/",
                        "//health", "/v1//models", "*", "http://host/health"}) {
    const Route r = route(verb::get, t);
    EXPECT_EQ(r.endpoint, Endpoint::kUnknown) << t;
    ASSERT_TRUE(r.refusal) << t;
    EXPECT_EQ(r.refusal->status, 404) << t;
    EXPECT_EQ(r.refusal->code, "unknown_url") << t;
  }
}

TEST(RequestHead, MethodsEachEndpointRefuses) {
  struct Case {
    verb method;
    const char* target;
    int status;  // 0: taken
  };
  const Case cases[] = {
      {verb::head, "/health", 0},          {verb::post, "/health", 405},          {verb::delete_, "/ready", 0},
      {verb::post, "/metrics", 0},         {verb::head, "/", 0},                  {verb::post, "/", 405},
      {verb::post, "/v1/models", 405},     {verb::head, "/v1/models", 405},       {verb::get, "/v1/audio/speech", 405},
      {verb::put, "/v1/audio/speech", 405}, {verb::post, "/v1/audio/speech/stream", 405}, {verb::put, "/v1/audio/voices", 405},
      {verb::delete_, "/v1/audio/voices", 405}, {verb::post, "/v1/audio/voices/v1", 405}, {verb::patch, "/v1/audio/voices/v1", 405},
      {verb::unknown, "/v1/audio/speech", 405}, {verb::unknown, "/ready", 0},
  };
  for (const Case& c : cases) {
    const Route r = route(c.method, c.target);
    EXPECT_EQ(refusal_status(r), c.status) << http::to_string(c.method) << " " << c.target;
    if (r.refusal) {
      EXPECT_EQ(r.refusal->code, "method_not_allowed");
    }
  }
}

TEST(RequestHead, VoiceIdsThatCouldLeaveTheFolderAre400) {
  const std::string long_id(65, 'a');
  const std::vector<std::string> ids = {"..",  "../../etc/passwd", "..%2F..%2Fsecret", "%2e%2e", "a.voice", "a/b",
                                       "a\\b", "a b", "a%00", std::string("a\0b", 3), long_id, "voice_1/"};
  for (const std::string& id : ids) {
    const Route r = route(verb::get, "/v1/audio/voices/" + id);
    EXPECT_EQ(r.endpoint, Endpoint::kVoice) << id;
    ASSERT_TRUE(r.refusal) << id;
    EXPECT_EQ(r.refusal->status, 400) << id;
    EXPECT_EQ(r.refusal->param, "voice_id") << id;
  }
  // The id is checked before the method.
  EXPECT_EQ(refusal_status(route(verb::put, "/v1/audio/voices/..")), 400);
  EXPECT_EQ(refusal_status(route(verb::get, "/v1/audio/voices/" + std::string(64, 'a'))), 0);
}

TEST(RequestHead, TheQueryIsNotPartOfThePath) {
  Route r = route(verb::get, "/v1/models?limit=3&x=%2F");
  EXPECT_EQ(r.endpoint, Endpoint::kModels);
  EXPECT_EQ(r.path, "/v1/models");
  EXPECT_EQ(r.query, "limit=3&x=%2F");
  r = route(verb::get, "/v1/audio/voices/v1?x=../..");
  EXPECT_EQ(r.voice_id, "v1");
  EXPECT_FALSE(r.refusal);
  r = route(verb::get, "/health?");
  EXPECT_EQ(r.endpoint, Endpoint::kHealth);
  EXPECT_EQ(r.query, "");
  r = route(verb::get, "/v1/audio/speech/stream?api_key=k?more");
  EXPECT_EQ(r.endpoint, Endpoint::kSpeechStream);
  EXPECT_EQ(r.query, "api_key=k?more");
}

TEST(RequestHead, LabelsAndOpenEndpoints) {
  EXPECT_STREQ(endpoint_label(Endpoint::kVoice), "voices");
  EXPECT_STREQ(endpoint_label(Endpoint::kSpeechStream), "speech_stream");
  EXPECT_STREQ(endpoint_label(Endpoint::kUnknown), "unknown");
  for (Endpoint e : {Endpoint::kHealth, Endpoint::kReady, Endpoint::kMetrics, Endpoint::kPlayground}) EXPECT_TRUE(is_open(e));
  for (Endpoint e : {Endpoint::kModels, Endpoint::kSpeech, Endpoint::kSpeechStream, Endpoint::kVoices, Endpoint::kVoice, Endpoint::kUnknown})
    EXPECT_FALSE(is_open(e));
}

TEST(RequestHead, ApiKey) {
  const Route speech = route(verb::post, "/v1/audio/speech?api_key=k1");
  const Route stream = route(verb::get, "/v1/audio/speech/stream?x=1&api_key=k1");
  EXPECT_FALSE(check_api_key(speech, "", ""));  // no key configured: everything passes
  EXPECT_FALSE(check_api_key(speech, "Bearer k1", "k1"));
  auto e = check_api_key(speech, "", "k1");  // the query counts on the WebSocket endpoint only
  ASSERT_TRUE(e);
  EXPECT_EQ(e->status, 401);
  EXPECT_EQ(e->code, "invalid_api_key");
  EXPECT_NE(e->message.find("missing"), std::string::npos);
  for (const char* auth : {"Bearer k2", "bearer k1", "Bearer k1 ", "Bearer  k1", "Basic k1", "k1", "Bearer k", "Bearer k10"}) {
    e = check_api_key(speech, auth, "k1");
    ASSERT_TRUE(e) << auth;
    EXPECT_EQ(e->status, 401);
    EXPECT_NE(e->message.find("invalid"), std::string::npos) << auth;
  }
  EXPECT_FALSE(check_api_key(stream, "", "k1"));
  EXPECT_TRUE(check_api_key(stream, "Bearer wrong", "k1"));  // a header, when sent, is what counts
  EXPECT_TRUE(check_api_key(route(verb::get, "/v1/audio/speech/stream?api_key=k2"), "", "k1"));
  EXPECT_TRUE(check_api_key(route(verb::get, "/v1/audio/speech/stream?xapi_key=k1"), "", "k1"));
  EXPECT_TRUE(check_api_key(route(verb::get, "/v1/audio/speech/stream?api_key="), "", "k1"));
  EXPECT_FALSE(check_api_key(route(verb::get, "/v1/audio/speech/stream?api_key=k1&api_key=k2"), "", "k1"));
}

TEST(RequestHead, QueryParam) {
  EXPECT_EQ(query_param("a=1&b=2", "b"), "2");
  EXPECT_EQ(query_param("ab=1&b=2", "b"), "2");
  EXPECT_EQ(query_param("b=1&b=2", "b"), "1");
  EXPECT_EQ(query_param("b=x=y", "b"), "x=y");
  EXPECT_EQ(query_param("b", "b"), "");
  EXPECT_EQ(query_param("b=", "b"), "");
  EXPECT_EQ(query_param("", "b"), "");
  EXPECT_EQ(query_param("&&b=3&", "b"), "3");
}

TEST(RequestHead, JsonContentType) {
  for (const char* ct : {"application/json", "Application/JSON", "application/json; charset=utf-8", "application/json ;x=1",
                         "application/json  "})
    EXPECT_TRUE(is_json_content_type(ct)) << ct;
  for (const char* ct : {"", "application/jsonx", "application/json-seq", "text/json", "application/x-www-form-urlencoded",
                         "multipart/form-data; boundary=x", "application/ json"})
    EXPECT_FALSE(is_json_content_type(ct)) << ct;
}

TEST(RequestHead, ParseErrorsAnswers) {
  auto answer = [](boost::beast::error_code ec) { return refusal_for_parse_error(ec); };
  ASSERT_TRUE(answer(http::error::body_limit));
  EXPECT_EQ(answer(http::error::body_limit)->status, 413);
  ASSERT_TRUE(answer(http::error::header_limit));
  EXPECT_EQ(answer(http::error::header_limit)->status, 431);
  for (http::error e : {http::error::bad_method, http::error::bad_target, http::error::bad_version, http::error::bad_field,
                        http::error::bad_value, http::error::bad_content_length, http::error::bad_transfer_encoding,
                        http::error::bad_chunk, http::error::bad_line_ending}) {
    auto a = answer(e);
    ASSERT_TRUE(a) << static_cast<int>(e);
    EXPECT_EQ(a->status, 400);
    EXPECT_NE(a->message.find("malformed"), std::string::npos);
  }
  // A client that left (or stopped mid-message) gets no answer: the connection just closes.
  EXPECT_FALSE(answer(http::error::end_of_stream));
  EXPECT_FALSE(answer(http::error::partial_message));
  EXPECT_FALSE(answer(boost::asio::error::connection_reset));
  EXPECT_FALSE(answer(boost::asio::error::eof));
  EXPECT_FALSE(answer(boost::beast::error::timeout));
}

TEST(RequestHead, RefusalsAreTheApiEnvelope) {
  for (const Route& r : {route(verb::get, "/nope"), route(verb::get, "/v1/audio/voices/.."), route(verb::get, "/v1/audio/speech")}) {
    ASSERT_TRUE(r.refusal);
    const auto j = nlohmann::json::parse(r.refusal->to_json());
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  }
}

}  // namespace
}  // namespace chorus::server
