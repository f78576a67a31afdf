// Malformed and hostile requests, table-driven: each gets the right 4xx in OpenAI's error envelope
// (naming the field where one is to blame), and the server keeps serving afterwards.
#include <gtest/gtest.h>

// The case table leaves trailing fields at their defaults on purpose.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#include <chrono>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <nlohmann/json.hpp>

#include "server_fixture.h"
#include "support/test_support.h"

namespace chorus::server::testing {
namespace {

using nlohmann::json;

struct Case {
  std::string what;
  std::string method = "POST";
  std::string target = "/v1/audio/speech";
  std::string body;
  std::string content_type = "application/json";
  int status = 400;
  std::string param;  // expected error.param; empty: not checked
};

json good() { return {{"model", "tiny_cv"}, {"input", "Hi."}, {"voice", "ryan"}, {"max_new_tokens", 2}, {"response_format", "pcm"}}; }

std::string with(const std::string& key, const json& value) {
  json j = good();
  j[key] = value;
  return j.dump();
}

std::vector<Case> cases() {
  std::vector<Case> c;
  // Body syntax.
  for (const char* b : {"", "{", "}", "[]", "null", "42", "\"text\"", "{\"model\":}", "{'model':'x'}", "{\"a\":1,}",
                        "{\"model\":\"tiny_cv\",\"input\":\"Hi\"", "\xff\xfe{}", "{\"input\":\"\xc3\x28\"}",
                        "{\"input\":\"\xed\xa0\x80\"}", "{\"model\":NaN}", "{\"speed\":Infinity}", "{\"model\":\"tiny_cv\"}garbage",
                        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"})
    c.push_back({std::string("body ") + b, "POST", "/v1/audio/speech", b});
  // Required fields.
  for (const char* k : {"model", "input"}) {
    json j = good();
    j.erase(k);
    c.push_back({std::string("missing ") + k, "POST", "/v1/audio/speech", j.dump(), "application/json", 400, k});
  }
  c.push_back({"empty input", "POST", "/v1/audio/speech", with("input", "   "), "application/json", 400, "input"});
  c.push_back({"input too long", "POST", "/v1/audio/speech", with("input", std::string(5000, 'a')), "application/json", 400, "input"});
  c.push_back({"input with NUL", "POST", "/v1/audio/speech", with("input", std::string("a\0b", 3)), "application/json", 400, "input"});
  c.push_back({"unknown field", "POST", "/v1/audio/speech", with("foo", 1), "application/json", 400, "foo"});
  c.push_back({"huge unknown field", "POST", "/v1/audio/speech", with("x", std::string(100000, 'z')), "application/json", 400, "x"});
  // Wrong types for every string field.
  for (const char* k : {"model", "input", "instructions", "response_format", "stream_format", "language", "ref_text", "task_type"})
    for (const json& v : {json(123), json(true), json::array({1}), json::object({{"a", 1}})})
      c.push_back({std::string(k) + " = " + v.dump(), "POST", "/v1/audio/speech", with(k, v), "application/json", 400, k});
  // Wrong types and out-of-range values for every number field.
  const std::vector<std::pair<const char*, std::vector<json>>> numbers = {
      {"speed", {"1", 0.1, 4.5, -1, true, 1e300}},
      {"temperature", {"hot", -0.5, 3.0}},
      {"top_k", {1.5, -2, "5"}},
      {"top_p", {0, 1.5, -0.1}},
      {"repetition_penalty", {0, -1, "x"}},
      {"max_new_tokens", {0, -5, 1e12, 2.5}},
      {"seed", {-1, "7", 1.5, json::array()}},
      {"cfg_scale", {-1, 1000, false}},
  };
  for (const auto& [k, values] : numbers)
    for (const json& v : values)
      c.push_back({std::string(k) + " = " + v.dump(), "POST", "/v1/audio/speech", with(k, v), "application/json", 400, k});
  for (const char* k : {"x_vector_only_mode", "non_streaming_mode", "stream"})
    for (const json& v : {json(1), json("true")})
      c.push_back({std::string(k) + " = " + v.dump(), "POST", "/v1/audio/speech", with(k, v), "application/json", 400, k});
  // Enumerations.
  c.push_back({"format aac", "POST", "/v1/audio/speech", with("response_format", "aac"), "application/json", 400, "response_format"});
  c.push_back({"format ogg", "POST", "/v1/audio/speech", with("response_format", "ogg"), "application/json", 400, "response_format"});
  c.push_back({"stream_format ws", "POST", "/v1/audio/speech", with("stream_format", "ws"), "application/json", 400, "stream_format"});
  c.push_back({"task_type", "POST", "/v1/audio/speech", with("task_type", "Clone"), "application/json", 400, "task_type"});
  c.push_back({"language unknown", "POST", "/v1/audio/speech", with("language", "klingon"), "application/json", 400, "language"});
  // Voices in the request.
  c.push_back({"voice number", "POST", "/v1/audio/speech", with("voice", 5), "application/json", 400, "voice"});
  c.push_back({"voice empty", "POST", "/v1/audio/speech", with("voice", ""), "application/json", 400, "voice"});
  c.push_back({"voice object without id", "POST", "/v1/audio/speech", with("voice", {{"name", "x"}}), "application/json", 400, "voice"});
  c.push_back({"voice unknown", "POST", "/v1/audio/speech", with("voice", "nobody"), "application/json", 404, "voice"});
  c.push_back({"voice id traversal", "POST", "/v1/audio/speech", with("voice", {{"id", "../../etc/passwd"}}), "application/json", 404, "voice"});
  c.push_back({"model unknown", "POST", "/v1/audio/speech", with("model", "gpt-4o"), "application/json", 404, "model"});
  c.push_back({"model path", "POST", "/v1/audio/speech", with("model", "/etc/passwd"), "application/json", 404, "model"});
  // Reference audio.
  c.push_back({"ref_audio url", "POST", "/v1/audio/speech", with("ref_audio", "http://127.0.0.1/x.wav"), "application/json", 400, "ref_audio"});
  c.push_back({"ref_audio file path", "POST", "/v1/audio/speech", with("ref_audio", "/etc/passwd"), "application/json", 400, "ref_audio"});
  c.push_back({"ref_audio bad base64", "POST", "/v1/audio/speech", with("ref_audio", "data:audio/wav;base64,@@@@"), "application/json", 400, "ref_audio"});
  c.push_back({"ref_audio short base64", "POST", "/v1/audio/speech", with("ref_audio", "data:audio/wav;base64,QUJD="), "application/json", 400, "ref_audio"});
  c.push_back({"ref_audio not audio", "POST", "/v1/audio/speech", with("ref_audio", "data:audio/wav;base64,aGVsbG8gd29ybGQh"), "application/json", 400, "ref_audio"});
  c.push_back({"ref_audio no base64 marker", "POST", "/v1/audio/speech", with("ref_audio", "data:audio/wav,abcd"), "application/json", 400, "ref_audio"});
  // Content types, methods, paths.
  c.push_back({"text/plain", "POST", "/v1/audio/speech", good().dump(), "text/plain", 415});
  c.push_back({"form", "POST", "/v1/audio/speech", good().dump(), "application/x-www-form-urlencoded", 415});
  c.push_back({"GET speech", "GET", "/v1/audio/speech", "", "", 405});
  c.push_back({"unknown path", "GET", "/v1/nothing", "", "", 404});
  c.push_back({"path traversal", "GET", "/v1/audio/voices/..%2F..%2Fetc", "", "", 400, "voice_id"});
  c.push_back({"dots id", "GET", "/v1/audio/voices/..", "", "", 400, "voice_id"});
  c.push_back({"slash id", "DELETE", "/v1/audio/voices/a/b", "", "", 400, "voice_id"});
  c.push_back({"long id", "GET", "/v1/audio/voices/" + std::string(200, 'a'), "", "", 400, "voice_id"});
  c.push_back({"unknown id", "GET", "/v1/audio/voices/voice_0000000000000000", "", "", 404, "voice_id"});
  c.push_back({"voices PUT", "PUT", "/v1/audio/voices", "", "", 405});
  // Voice uploads.
  c.push_back({"voices json", "POST", "/v1/audio/voices", "{}", "application/json", 415});
  c.push_back({"voices no boundary", "POST", "/v1/audio/voices", "x", "multipart/form-data", 415});
  c.push_back({"voices garbage", "POST", "/v1/audio/voices", "garbage", "multipart/form-data; boundary=b", 400});
  c.push_back({"voices no name", "POST", "/v1/audio/voices", "--b\r\nContent-Disposition: form-data; name=\"audio_sample\"; filename=\"a.wav\"\r\n\r\nxx\r\n--b--\r\n",
               "multipart/form-data; boundary=b", 400, "name"});
  c.push_back({"voices no audio", "POST", "/v1/audio/voices", "--b\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nx\r\n--b--\r\n",
               "multipart/form-data; boundary=b", 400, "audio_sample"});
  c.push_back({"voices bad audio", "POST", "/v1/audio/voices",
               "--b\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nx\r\n--b\r\nContent-Disposition: form-data; name=\"audio_sample\"; filename=\"a.wav\"\r\n\r\nRIFFnonsense\r\n--b--\r\n",
               "multipart/form-data; boundary=b", 400, "audio_sample"});
  c.push_back({"voices unterminated", "POST", "/v1/audio/voices", "--b\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nx",
               "multipart/form-data; boundary=b", 400});
  c.push_back({"voices unknown field", "POST", "/v1/audio/voices", "--b\r\nContent-Disposition: form-data; name=\"evil\"\r\n\r\nx\r\n--b--\r\n",
               "multipart/form-data; boundary=b", 400, "evil"});
  return c;
}

class Hostile : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServiceOptions o;
    HttpOptions h;
    h.max_body_bytes = 1 << 20;
    h.header_timeout = std::chrono::seconds(1);
    s_ = new RunningServer(start_server(o, h));
  }
  static void TearDownTestSuite() {
    delete s_;
  }
  static RunningServer* s_;
};
RunningServer* Hostile::s_ = nullptr;

TEST_F(Hostile, EveryCaseGetsItsStatusAndTheServerStaysUp) {
  ASSERT_NE(s_->http, nullptr);
  const auto all = cases();
  ASSERT_GE(all.size(), 80u);
  for (const auto& c : all) {
    auto r = http_request(s_->port(), c.method, c.target, c.body, c.content_type);
    EXPECT_EQ(r.status, c.status) << c.what << ": " << r.body;
    if (r.status >= 400) {
      auto j = nlohmann::json::parse(r.body, nullptr, false);
      ASSERT_FALSE(j.is_discarded()) << c.what << ": not JSON: " << r.body;
      ASSERT_TRUE(j.contains("error")) << c.what;
      EXPECT_TRUE(j["error"]["message"].is_string()) << c.what;
      EXPECT_TRUE(j["error"]["type"].is_string()) << c.what;
      if (!c.param.empty()) {
        EXPECT_EQ(j["error"]["param"], c.param) << c.what << ": " << r.body;
      }
    }
    ASSERT_EQ(http_request(s_->port(), "GET", "/health").status, 200) << "after " << c.what;
  }
  // And a good request still works.
  EXPECT_EQ(http_request(s_->port(), "POST", "/v1/audio/speech", good().dump()).status, 200);
}

TEST_F(Hostile, OversizeBodiesAre413) {
  std::string big = "{\"model\":\"tiny_cv\",\"input\":\"" + std::string(2 << 20, 'a') + "\"}";
  EXPECT_EQ(http_request(s_->port(), "POST", "/v1/audio/speech", big).status, 413);
  // A declared length over the limit is refused before the body is read.
  std::string resp;
  EXPECT_EQ(raw_request(s_->port(), "POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 999999999\r\n\r\n{", &resp), 413);
  EXPECT_EQ(http_request(s_->port(), "GET", "/health").status, 200);
}

TEST_F(Hostile, MalformedHttpIsRefused) {
  EXPECT_EQ(raw_request(s_->port(), "NONSENSE\r\n\r\n"), 400);
  EXPECT_EQ(raw_request(s_->port(), "GET / HTTP/9.9\r\n\r\n"), 400);
  EXPECT_EQ(raw_request(s_->port(), "POST /v1/audio/speech HTTP/1.1\r\nContent-Length: abc\r\n\r\n"), 400);
  EXPECT_EQ(raw_request(s_->port(), "GET /health HTTP/1.1\r\nX: " + std::string(64 << 10, 'a') + "\r\n\r\n"), 431);
  EXPECT_EQ(http_request(s_->port(), "GET", "/health").status, 200);
}

TEST_F(Hostile, SlowHeadersAreCutOff) {
  namespace net = boost::asio;
  net::io_context ioc;
  net::ip::tcp::socket sock(ioc);
  sock.connect({net::ip::make_address("127.0.0.1"), s_->port()});
  net::write(sock, net::buffer(std::string("GET /health HTTP/1.1\r\nX-Slow: a")));
  const auto t0 = std::chrono::steady_clock::now();
  char b[64];
  boost::system::error_code ec;
  while (!ec) sock.read_some(net::buffer(b), ec);  // the server closes the connection
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 5.0);
  EXPECT_EQ(http_request(s_->port(), "GET", "/health").status, 200);
}

}  // namespace
}  // namespace chorus::server::testing
