#include "server/http_server.h"

#include <sys/socket.h>

#include <array>
#include <deque>
#include <mutex>
#include <optional>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include "server/connection_book.h"
#include "server/request_head.h"
#include "server/websocket_detail.h"

namespace chorus::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct HttpServer::Impl {
  HttpOptions options;
  Handler handler;
  ErrorBody error_body;
  // Before the context: connections still queued in it at destruction leave the book.
  std::shared_ptr<detail::ConnectionBook> book = std::make_shared<detail::ConnectionBook>();
  net::io_context ioc;
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  std::atomic<bool> accepting{false};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;

  explicit Impl(HttpOptions o) : options(o) {}
  void accept();
};

// `server_` is used on the strand only, which no thread runs once the server has stopped; calls
// from other threads go through the book, which the session keeps.
class Session : public detail::Detachable, public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, HttpServer::Impl& server)
      : stream_(std::in_place, std::move(socket)), server_(server), book_(server.book) {
    ++book_->open;
  }
  ~Session() override {
    if (entered_) book_->leave(entry_);
    --book_->open;
  }

  // On an I/O thread (the acceptor's handler).
  void start() {
    entry_ = book_->enter(shared_from_this());
    entered_ = true;
    net::dispatch(stream_->get_executor(), [self = shared_from_this()] { self->read_request(true); });
  }

  void detach() override {
    close();
    stream_.reset();
  }

  // --- whole responses
  void respond(Response res) {
    post([self = shared_from_this(), res = std::move(res)]() mutable { self->write_response(std::move(res)); });
  }

  // --- streamed responses
  void start_stream(Response head) {
    post([self = shared_from_this(), head = std::move(head)]() mutable {
      self->stream_head_.emplace(head.result(), head.version());
      for (const auto& f : head) self->stream_head_->set(f.name_string(), f.value());
      self->stream_head_->chunked(true);
      self->stream_head_->keep_alive(self->keep_alive_);
      self->streaming_ = true;
      self->head_sent_ = self->writing_ = self->finish_requested_ = self->last_sent_ = false;
      self->serializer_.emplace(*self->stream_head_);
      self->stream_->expires_after(self->server_.options.write_timeout);
      http::async_write_header(*self->stream_, *self->serializer_, [self](beast::error_code ec, size_t) {
        if (ec) return self->client_gone();
        self->head_sent_ = true;
        self->watch_disconnect();
        self->pump();
      });
    });
  }
  void stream_send(std::string bytes) {
    if (bytes.empty()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      backlog_ += bytes.size();
    }
    const size_t n = bytes.size();
    const bool posted = post([self = shared_from_this(), b = std::move(bytes)]() mutable {
      self->chunks_.push_back(std::move(b));
      self->pump();
    });
    if (!posted) {
      std::lock_guard<std::mutex> lock(mu_);
      backlog_ -= std::min(backlog_, n);
    }
  }
  void stream_finish() {
    post([self = shared_from_this()] {
      self->finish_requested_ = true;
      self->pump();
    });
  }
  void stream_abort() {
    post([self = shared_from_this()] { self->close(); });
  }
  void on_gone(std::function<void()> f) {
    bool call = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (gone_) call = true;
      else on_gone_ = std::move(f);
    }
    if (call && f) f();
  }
  size_t backlog() const {
    std::lock_guard<std::mutex> lock(mu_);
    return backlog_;
  }
  bool gone() const {
    std::lock_guard<std::mutex> lock(mu_);
    return gone_;
  }
  // On the strand (from the handler): the socket and what was read past the request move on.
  std::shared_ptr<WebSocket> upgrade(Request&& req) {
    closed_ = true;  // nothing here touches the socket any more
    auto ws = detail::make_websocket(std::move(*stream_), std::move(buffer_), std::move(req), server_.options, book_);
    stream_.reset();
    return ws;
  }

 private:
  // Hands f to the connection's strand, from any thread; false (f dropped) once the server has
  // stopped or the socket has gone to a WebSocket.
  template <class F>
  bool post(F&& f) {
    bool posted = false;
    book_->unless_stopped([&] {
      if (!stream_) return;
      net::post(stream_->get_executor(), std::forward<F>(f));
      posted = true;
    });
    return posted;
  }

  void read_request(bool first) {
    parser_.emplace();
    parser_->header_limit(server_.options.max_header_bytes);
    parser_->body_limit(server_.options.max_body_bytes);
    stream_->expires_after(first ? server_.options.header_timeout : server_.options.idle_timeout);
    http::async_read_header(*stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      self->on_header(ec);
    });
  }

  void on_header(beast::error_code ec) {
    if (ec) return refuse_or_close(ec);
    stream_->expires_after(server_.options.body_timeout);
    http::async_read(*stream_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec2, size_t) {
      self->on_body(ec2);
    });
  }

  void refuse_or_close(beast::error_code ec) {
    if (auto r = refusal_for_parse_error(ec)) return refuse(static_cast<http::status>(r->status), r->message);
    close();
  }

  void refuse(http::status status, const std::string& message) {
    Response res{status, 11};
    res.set(http::field::content_type, "application/json");
    res.body() = server_.error_body(static_cast<int>(status), message);
    res.keep_alive(false);
    keep_alive_ = false;
    drain_on_close_ = true;
    write_response(std::move(res));
  }

  void on_body(beast::error_code ec) {
    if (ec) return refuse_or_close(ec);
    stream_->expires_never();
    Request req = parser_->release();
    keep_alive_ = req.keep_alive();
    server_.handler(std::move(req), Responder(shared_from_this()));
  }

  void write_response(Response res) {
    res.keep_alive(keep_alive_ && res.keep_alive());
    const bool keep = res.keep_alive();
    res.prepare_payload();
    auto sp = std::make_shared<Response>(std::move(res));
    stream_->expires_after(server_.options.write_timeout);
    http::async_write(*stream_, *sp, [self = shared_from_this(), sp, keep](beast::error_code ec, size_t) {
      if (!ec && !keep && self->drain_on_close_) return self->drain_then_close();
      if (ec || !keep) return self->close();
      self->read_request(false);
    });
  }

  // Writes queued chunks one at a time; the last chunk once finish() was asked for and the queue
  // is empty.
  void pump() {
    if (!head_sent_ || writing_ || closed_) return;
    if (!chunks_.empty()) {
      writing_ = true;
      auto data = std::make_shared<std::string>(std::move(chunks_.front()));
      chunks_.pop_front();
      stream_->expires_after(server_.options.write_timeout);
      net::async_write(*stream_, http::make_chunk(net::buffer(*data)), [self = shared_from_this(), data](beast::error_code ec, size_t) {
        self->writing_ = false;
        {
          std::lock_guard<std::mutex> lock(self->mu_);
          self->backlog_ -= std::min(self->backlog_, data->size());
        }
        if (ec) return self->client_gone();
        self->pump();
      });
      return;
    }
    if (finish_requested_ && !last_sent_) {
      last_sent_ = true;
      writing_ = true;
      stream_->expires_after(server_.options.write_timeout);
      net::async_write(*stream_, http::make_chunk_last(), [self = shared_from_this()](beast::error_code ec, size_t) {
        self->writing_ = false;
        self->streaming_ = false;
        if (ec || !self->keep_alive_) return self->close();
        self->serializer_.reset();
        self->stream_head_.reset();
        self->read_request(false);
      });
    }
  }

  // While a response streams, the client sends nothing (or its next pipelined request): readable
  // with nothing to read means it closed the connection.
  void watch_disconnect() {
    stream_->socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (!self->streaming_ || self->closed_) return;
      if (ec) return self->client_gone();
      char b;
      const ssize_t n = ::recv(self->stream_->socket().native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return self->client_gone();
      if (n < 0) return self->watch_disconnect();
      // A pipelined request waits in the socket: stop watching, it is read after this response.
    });
  }

  void client_gone() {
    close();
  }

  // A refused request's body may still be arriving: closing with unread bytes makes the kernel send
  // a reset that can destroy the refusal before the client reads it. So stop sending, and read and
  // drop what comes for a bounded time and amount, then close.
  void drain_then_close() {
    beast::error_code ec;
    stream_->socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_->expires_after(std::chrono::seconds(2));
    drain_some();
  }
  void drain_some() {
    static constexpr size_t kMaxDrained = 16u << 20;
    stream_->async_read_some(net::buffer(drain_buf_), [self = shared_from_this()](beast::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > kMaxDrained) return self->close();
      self->drain_some();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (stream_) {
      beast::error_code ec;
      stream_->socket().shutdown(tcp::socket::shutdown_both, ec);
      stream_->socket().close(ec);
    }
    std::function<void()> f;
    {
      std::lock_guard<std::mutex> lock(mu_);
      gone_ = true;
      f = std::move(on_gone_);
      backlog_ = 0;
    }
    chunks_.clear();
    if (f) f();
  }

  std::optional<beast::tcp_stream> stream_;  // empty once detached or handed to a WebSocket
  HttpServer::Impl& server_;
  std::shared_ptr<detail::ConnectionBook> book_;
  detail::ConnectionBook::Entry entry_{};
  bool entered_ = false;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  // Streaming state (strand only).
  std::optional<http::response<http::empty_body>> stream_head_;
  std::optional<http::response_serializer<http::empty_body>> serializer_;
  std::deque<std::string> chunks_;
  bool streaming_ = false, head_sent_ = false, writing_ = false, finish_requested_ = false, last_sent_ = false;
  bool closed_ = false;
  bool drain_on_close_ = false;  // a refusal: drain the rest of the request before closing
  size_t drained_ = 0;
  std::array<char, 16384> drain_buf_{};
  // Shared with other threads.
  mutable std::mutex mu_;
  size_t backlog_ = 0;
  bool gone_ = false;
  std::function<void()> on_gone_;
};

void StreamResponse::send(std::string bytes) { session_->stream_send(std::move(bytes)); }
void StreamResponse::finish() { session_->stream_finish(); }
void StreamResponse::abort() { session_->stream_abort(); }
void StreamResponse::on_gone(std::function<void()> f) { session_->on_gone(std::move(f)); }
size_t StreamResponse::backlog() const { return session_->backlog(); }
bool StreamResponse::gone() const { return session_->gone(); }

void Responder::respond(Response res) { session_->respond(std::move(res)); }
std::shared_ptr<StreamResponse> Responder::start_stream(Response head) {
  session_->start_stream(std::move(head));
  return std::make_shared<StreamResponse>(session_);
}

std::shared_ptr<WebSocket> Responder::upgrade(Request req) { return session_->upgrade(std::move(req)); }
bool Responder::is_websocket_upgrade(const Request& req) { return boost::beast::websocket::is_upgrade(req); }

void HttpServer::Impl::accept() {
  acceptor->async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (!accepting.load()) return;
    if (!ec) {
      if (book->open.load() >= options.max_connections) {
        beast::error_code ignored;
        socket.close(ignored);  // over the cap: refused before any work is spent on it
      } else {
        std::make_shared<Session>(std::move(socket), *this)->start();
      }
    }
    accept();
  });
}

HttpServer::HttpServer(HttpOptions options, Handler handler, ErrorBody error_body) : impl_(std::make_unique<Impl>(options)) {
  impl_->handler = std::move(handler);
  impl_->error_body = std::move(error_body);
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::connections() const { return impl_->book->open.load(); }

Status HttpServer::listen(const std::string& host, uint16_t port) {
  beast::error_code ec;
  const auto addr = net::ip::make_address(host, ec);
  if (ec) return make_error(ErrorCode::kInvalidArgument, "--host: '" + host + "' is not an IP address");
  tcp::endpoint ep{addr, port};
  impl_->acceptor.emplace(impl_->ioc);
  impl_->acceptor->open(ep.protocol(), ec);
  if (!ec) impl_->acceptor->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl_->acceptor->bind(ep, ec);
  if (!ec) impl_->acceptor->listen(net::socket_base::max_listen_connections, ec);
  if (ec) return make_error(ErrorCode::kIo, "cannot listen on " + host + ":" + std::to_string(port) + ": " + ec.message());
  port_ = impl_->acceptor->local_endpoint().port();
  return ok_status();
}

void HttpServer::start() {
  impl_->accepting = true;
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->accept();
  for (int i = 0; i < std::max(1, impl_->options.threads); ++i) impl_->threads.emplace_back([this] { impl_->ioc.run(); });
}

void HttpServer::stop_accepting() {
  if (!impl_->acceptor) return;
  net::post(impl_->ioc, [this] {
    impl_->accepting = false;
    beast::error_code ec;
    if (impl_->acceptor) impl_->acceptor->close(ec);
  });
}

void HttpServer::stop() {
  if (impl_->threads.empty()) return;
  impl_->accepting = false;
  impl_->book->mark_stopped();
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  // What callers still hold loses its socket now, while the I/O context that owns it exists.
  for (const auto& c : impl_->book->live()) c->detach();
}

}  // namespace chorus::server
