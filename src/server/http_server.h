// HTTP/1.1 on Boost.Beast + Asio: a fixed pool of I/O threads serves every connection
// asynchronously (never a thread per connection), with keep-alive, a body limit (413), a header
// limit (431), per-phase deadlines against slow clients (headers, body, each write), a connection
// cap, and streamed responses (chunked transfer encoding) whose client going away is noticed at
// once, so the work behind it can be cancelled.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include "core/error.h"

namespace chorus::server {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Response = boost::beast::http::response<boost::beast::http::string_body>;

struct HttpOptions {
  size_t max_body_bytes = 32u << 20;
  uint32_t max_header_bytes = 16u << 10;
  std::chrono::seconds header_timeout{10};
  std::chrono::seconds body_timeout{60};
  std::chrono::seconds write_timeout{30};  // one write of a response or chunk
  std::chrono::seconds idle_timeout{30};   // between requests on a kept-alive connection
  int max_connections = 512;
  int threads = 2;
};

class Session;
class WebSocket;

// A streamed response in progress. Thread-safe: every call is handed to the connection's strand.
class StreamResponse {
 public:
  explicit StreamResponse(std::shared_ptr<Session> s) : session_(std::move(s)) {}
  void send(std::string bytes);  // one chunk (empty strings are dropped)
  void finish();                 // the last chunk; the connection then serves its next request
  void abort();                  // closes the connection (the client sees a truncated body)
  // Called once, on an I/O thread, when the client is gone (disconnect or a failed write).
  void on_gone(std::function<void()> f);
  // Bytes handed to send() and not yet written: a slow reader's backlog.
  size_t backlog() const;
  bool gone() const;

 private:
  std::shared_ptr<Session> session_;
};

// How a handler answers: once, with a whole response or by starting a stream. Any thread.
class Responder {
 public:
  explicit Responder(std::shared_ptr<Session> s) : session_(std::move(s)) {}
  void respond(Response res);
  // Sends `head` (status and headers; the body is ignored) with chunked transfer encoding.
  std::shared_ptr<StreamResponse> start_stream(Response head);
  // Takes the connection over as a WebSocket (websocket.h) for a request that asked for the
  // upgrade (is_websocket_upgrade()); nothing else may answer it then. Call from the handler,
  // before it returns (the connection is handed over on its I/O thread).
  std::shared_ptr<WebSocket> upgrade(Request req);
  static bool is_websocket_upgrade(const Request& req);

 private:
  std::shared_ptr<Session> session_;
};

using Handler = std::function<void(Request&& req, Responder responder)>;
// Answers for requests refused before a handler sees them (413, 431, 400): status, JSON body.
using ErrorBody = std::function<std::string(int status, const std::string& message)>;

// A Responder (and the StreamResponse or WebSocket it starts) may be held past stop() and past the
// server itself: stop() closes and destroys the sockets of every connection still held (the client
// counts as gone: on_gone and on_closed run on the stopping thread), and their calls then do nothing.
class HttpServer {
 public:
  HttpServer(HttpOptions options, Handler handler, ErrorBody error_body);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; port 0 picks a free port (see port()).
  Status listen(const std::string& host, uint16_t port);
  uint16_t port() const { return port_; }
  // Starts the I/O threads and returns.
  void start();
  // Stops accepting new connections (the open ones keep being served).
  void stop_accepting();
  // Joins the I/O threads, then closes every connection still open or held.
  void stop();
  int connections() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
};

}  // namespace chorus::server
