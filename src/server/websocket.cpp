#include "server/websocket.h"

#include <deque>
#include <mutex>
#include <optional>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>

#include "server/connection_book.h"
#include "server/websocket_detail.h"

namespace chorus::server {

namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace net = boost::asio;

struct WebSocket::Impl : detail::Detachable, std::enable_shared_from_this<Impl> {
  Impl(beast::tcp_stream&& s, beast::flat_buffer&& b, Request&& r, const HttpOptions& o,
       std::shared_ptr<detail::ConnectionBook> bk)
      : ws(std::in_place, std::move(s)), buffer(std::move(b)), req(std::move(r)), options(o), book(std::move(bk)) {
    ++book->open;
  }
  ~Impl() override {
    if (entered) book->leave(entry);
    --book->open;
  }

  void detach() override {
    finish();
    ws.reset();
  }

  // Hands f to the connection's strand, from any thread; false (f dropped) once the server has stopped.
  template <class F>
  bool post(F&& f) {
    return book->unless_stopped([&] { net::post(ws->get_executor(), std::forward<F>(f)); });
  }

  std::optional<websocket::stream<beast::tcp_stream>> ws;  // empty once detached
  beast::flat_buffer buffer;
  Request req;
  HttpOptions options;
  std::shared_ptr<detail::ConnectionBook> book;
  detail::ConnectionBook::Entry entry{};
  bool entered = false;
  WebSocketCallbacks callbacks;
  // Strand only.
  struct Out {
    std::string data;
    bool binary;
  };
  std::deque<Out> queue;
  bool writing = false, closed = false, close_requested = false, close_sent = false;
  websocket::close_reason reason;
  // Shared with other threads.
  mutable std::mutex mu;
  size_t backlog = 0;
  bool gone = false;

  void start() {
    beast::get_lowest_layer(*ws).expires_never();
    websocket::stream_base::timeout t;
    t.handshake_timeout = options.header_timeout;
    // A vanished peer (no TCP reset) is found by pings: no answer within the idle time ends it.
    t.idle_timeout = std::max(options.idle_timeout, std::chrono::seconds(1)) * 2;
    t.keep_alive_pings = true;
    ws->set_option(t);
    ws->read_message_max(options.max_body_bytes);
    ws->set_option(websocket::stream_base::decorator([](websocket::response_type& res) { res.set(beast::http::field::server, "chorus"); }));
    ws->async_accept(req, [self = shared_from_this()](beast::error_code ec) {
      self->req = {};
      if (ec) return self->finish();
      self->read();
      self->pump();
    });
  }

  void read() {
    ws->async_read(buffer, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->finish();
      std::string message = beast::buffers_to_string(self->buffer.data());
      self->buffer.consume(self->buffer.size());
      if (self->callbacks.on_message) self->callbacks.on_message(std::move(message), !self->ws->got_text());
      if (!self->closed) self->read();
    });
  }

  void send(std::string data, bool binary) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (gone) return;
      backlog += data.size();
    }
    const size_t n = data.size();
    const bool posted = post([self = shared_from_this(), d = std::move(data), binary]() mutable {
      if (self->closed || self->close_requested) return self->unqueue(d.size());
      self->queue.push_back({std::move(d), binary});
      self->pump();
    });
    if (!posted) unqueue(n);
  }

  void unqueue(size_t n) {
    std::lock_guard<std::mutex> lock(mu);
    backlog -= std::min(backlog, n);
  }

  // Writes queued messages one at a time (the handshake must be done: is_open()), then the close
  // frame once asked for.
  void pump() {
    if (writing || closed || !ws->is_open()) return;
    if (!queue.empty()) {
      writing = true;
      auto out = std::make_shared<Out>(std::move(queue.front()));
      queue.pop_front();
      ws->binary(out->binary);
      ws->async_write(net::buffer(out->data), [self = shared_from_this(), out](beast::error_code ec, size_t) {
        self->writing = false;
        self->unqueue(out->data.size());
        if (ec) return self->finish();
        self->pump();
      });
      return;
    }
    if (close_requested && !close_sent) {
      close_sent = true;
      writing = true;
      ws->async_close(reason, [self = shared_from_this()](beast::error_code) {
        self->writing = false;
        self->finish();
      });
    }
  }

  void finish() {
    if (closed) return;
    closed = true;
    if (ws) {
      beast::error_code ec;
      beast::get_lowest_layer(*ws).socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
      beast::get_lowest_layer(*ws).socket().close(ec);
    }
    queue.clear();
    {
      std::lock_guard<std::mutex> lock(mu);
      gone = true;
      backlog = 0;
    }
    // Dropping the callbacks breaks the cycle through the owner's session, which holds this.
    WebSocketCallbacks cb = std::move(callbacks);
    callbacks = {};
    if (cb.on_closed) cb.on_closed();
  }
};

void WebSocket::start(WebSocketCallbacks callbacks) {
  impl_->book->unless_stopped([&] {
    net::dispatch(impl_->ws->get_executor(), [impl = impl_, cb = std::move(callbacks)]() mutable {
      impl->callbacks = std::move(cb);
      impl->start();
    });
  });
}

void WebSocket::send_text(std::string message) { impl_->send(std::move(message), false); }
void WebSocket::send_binary(std::string message) { impl_->send(std::move(message), true); }

void WebSocket::close(int code, std::string reason) {
  impl_->post([impl = impl_, code, r = std::move(reason)] {
    if (impl->close_requested || impl->closed) return;
    impl->close_requested = true;
    impl->reason = websocket::close_reason(static_cast<websocket::close_code>(code), r);
    impl->pump();
  });
}

size_t WebSocket::backlog() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->backlog;
}

bool WebSocket::gone() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->gone;
}

namespace detail {

std::shared_ptr<WebSocket> make_websocket(beast::tcp_stream&& stream, beast::flat_buffer&& buffer, Request&& req,
                                          const HttpOptions& options, std::shared_ptr<ConnectionBook> book) {
  auto impl = std::make_shared<WebSocket::Impl>(std::move(stream), std::move(buffer), std::move(req), options, std::move(book));
  impl->entry = impl->book->enter(impl);
  impl->entered = true;
  return std::make_shared<WebSocket>(std::move(impl));
}

}  // namespace detail

}  // namespace chorus::server
