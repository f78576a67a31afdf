// A server-side WebSocket (RFC 6455, Boost.Beast) taken over from an HTTP connection whose request
// asked for the upgrade: messages are read one at a time and handed to a callback in order; sends
// from any thread are queued and written one after another. Like a streamed HTTP response it
// counts the bytes queued and not yet written (a slow reader's backlog) and reports a vanished
// client (a failed read or write, or no answer to pings) once.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "server/http_server.h"

namespace chorus::server {

struct WebSocketCallbacks {
  // A whole message (text, or binary when `binary`), on an I/O thread; the next one is read after
  // it returns.
  std::function<void(std::string message, bool binary)> on_message;
  // Once, on an I/O thread, when the connection is over (closed by either side or lost).
  std::function<void()> on_closed;
};

class WebSocket {
 public:
  struct Impl;
  explicit WebSocket(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

  // Completes the handshake and starts reading. Call once.
  void start(WebSocketCallbacks callbacks);
  void send_text(std::string message);
  void send_binary(std::string message);
  // Sends a close frame after the queued messages (code 1000 normal, 1008 policy, 1011 error).
  void close(int code = 1000, std::string reason = {});
  size_t backlog() const;
  bool gone() const;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace chorus::server
