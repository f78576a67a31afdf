// The HTTP layer alone (server/http_server.h, server/websocket.h), without the speech service: small
// enough to run under ASan+UBSan in scripts/test.sh, where a use after free or a leak at shutdown shows.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include "server/http_server.h"
#include "server/websocket.h"

namespace chorus::server {
namespace {

// Whoever holds a Responder, a streamed response or a WebSocket may keep it past the server: the
// server's stop() closes those connections (the clients see them end, the holders hear that the
// client is gone), and calls on them afterwards do nothing, where they used to post into an I/O
// context that was gone (a crash at shutdown, seen once in CI).
TEST(HttpServerLifetime, ConnectionsHeldPastTheServerAreClosedAndInert) {
  namespace net = boost::asio;
  namespace beast = boost::beast;
  using tcp = net::ip::tcp;
  struct Held {
    std::mutex mu;
    std::optional<Responder> whole;
    std::shared_ptr<StreamResponse> stream;
    std::shared_ptr<WebSocket> ws;
    std::atomic<int> handled{0}, gone{0}, closed{0};
  };
  auto held = std::make_shared<Held>();
  auto http = std::make_unique<HttpServer>(
      HttpOptions{},
      [held](Request&& req, Responder r) {
        std::lock_guard<std::mutex> lock(held->mu);
        if (req.target() == "/stream") {
          Response head{boost::beast::http::status::ok, 11};
          held->stream = r.start_stream(std::move(head));
          held->stream->on_gone([held] { ++held->gone; });
          held->stream->send("first");
        } else if (req.target() == "/ws") {
          held->ws = r.upgrade(std::move(req));
          held->ws->start({[](std::string, bool) {}, [held] { ++held->closed; }});
        } else {
          held->whole.emplace(std::move(r));  // never answered while the server runs
        }
        ++held->handled;
      },
      [](int, const std::string& m) { return m; });
  ASSERT_TRUE(http->listen("127.0.0.1", 0).ok());
  http->start();
  const uint16_t port = http->port();

  net::io_context io;
  const tcp::endpoint at(net::ip::make_address("127.0.0.1"), port);
  tcp::socket whole(io), stream(io);
  whole.connect(at);
  stream.connect(at);
  net::write(whole, net::buffer(std::string("GET /whole HTTP/1.1\r\nHost: x\r\n\r\n")));
  net::write(stream, net::buffer(std::string("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")));
  std::string head;
  net::read_until(stream, net::dynamic_buffer(head), "\r\n\r\n");  // the stream has started
  beast::websocket::stream<tcp::socket> ws(io);
  ws.next_layer().connect(at);
  ws.handshake("127.0.0.1", "/ws");
  for (int i = 0; i < 400 && held->handled.load() < 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(held->handled.load(), 3);
  // An upgraded connection is counted by its WebSocket from the upgrade on and by its HTTP session
  // until that session lets go after the handler, so the count may read 4 for a moment.
  for (int i = 0; i < 400 && http->connections() != 3; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(http->connections(), 3);

  http->stop();
  http.reset();
  // The holders heard the clients go, and the clients see their connections end.
  EXPECT_EQ(held->gone.load(), 1);
  EXPECT_EQ(held->closed.load(), 1);
  EXPECT_TRUE(held->stream->gone());
  EXPECT_TRUE(held->ws->gone());
  const auto ends = [](tcp::socket& s) {
    std::array<char, 4096> b{};
    beast::error_code ec;
    for (int i = 0; i < 64 && !ec; ++i) s.read_some(net::buffer(b), ec);
    return ec == net::error::eof || ec == net::error::connection_reset;
  };
  EXPECT_TRUE(ends(whole));
  EXPECT_TRUE(ends(stream));
  EXPECT_TRUE(ends(ws.next_layer()));

  // Calls on what is still held do nothing and leave no backlog.
  held->stream->send("late");
  held->stream->finish();
  held->stream->abort();
  EXPECT_EQ(held->stream->backlog(), 0u);
  held->whole->respond(Response{boost::beast::http::status::ok, 11});
  held->ws->send_text("late");
  held->ws->close();
  EXPECT_EQ(held->ws->backlog(), 0u);
  held->stream.reset();
  held->ws.reset();
  held->whole.reset();
}

}  // namespace
}  // namespace chorus::server
