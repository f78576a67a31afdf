// What a finished request leaves behind: nothing. After every kind of answer (streamed audio,
// SSE, a whole body, a 429, a 400) the connection object must go away once the client has closed
// its side, so the open-connection count returns to zero and the metrics gauge to the scrape's own
// connection. A reference cycle between a response in progress and its connection would keep both
// (and the synthesis state behind them) forever.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "server_fixture.h"

namespace chorus::server::testing {
namespace {

using nlohmann::json;

// Polls until the server holds no connection; the last count seen.
int settle_connections(const RunningServer& s) {
  int n = s.http->connections();
  for (int i = 0; i < 200 && n != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    n = s.http->connections();
  }
  return n;
}

json request(const std::string& format) {
  return {{"model", "tiny_cv"}, {"input", "Hello there."}, {"voice", "ryan"}, {"seed", 3}, {"max_new_tokens", 5},
          {"response_format", format}};
}

TEST(ServerLifecycle, EveryKindOfAnswerReleasesItsConnection) {
  auto s = start_server();
  ASSERT_NE(s.http, nullptr);
  struct Case {
    const char* what;
    json body;
    int status;
  };
  json sse = request("pcm"), whole = request("wav"), bad = request("pcm");
  sse["stream_format"] = "sse";
  whole["stream"] = false;
  bad["speed"] = 9;
  const Case cases[] = {{"streamed pcm", request("pcm"), 200}, {"streamed mp3", request("mp3"), 200},
                        {"sse", sse, 200}, {"whole body", whole, 200}, {"bad field", bad, 400}};
  for (const Case& c : cases) {
    const Reply r = http_request(s.port(), "POST", "/v1/audio/speech", c.body.dump());
    EXPECT_EQ(r.status, c.status) << c.what;
    if (c.status == 200) {
      EXPECT_FALSE(r.body.empty()) << c.what;
    }
    EXPECT_EQ(settle_connections(s), 0) << c.what;
  }
  // The gauge counts the scrape's own connection.
  EXPECT_EQ(metric(http_request(s.port(), "GET", "/metrics").body, "chorus_http_connections"), 1);
}

TEST(ServerLifecycle, ARefusedRequestReleasesItsConnection) {
  ServiceOptions o;
  o.synthesizer.max_running = 1;
  o.synthesizer.max_queued = 0;
  auto s = start_server(o);
  ASSERT_NE(s.http, nullptr);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(http_request(s.port(), "POST", "/v1/audio/speech", request("pcm").dump()).status, 429);
    EXPECT_EQ(settle_connections(s), 0);
  }
}

}  // namespace
}  // namespace chorus::server::testing
