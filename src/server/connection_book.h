// What the connections of one HttpServer share with it (http_server.cpp, websocket.cpp): the count
// of open connections, whether the server has stopped, and the list of live connections. Each
// connection keeps the book alive, so a Responder, StreamResponse or WebSocket that a caller holds
// past stop(), or past the server, still finds it: by then its connection has been detached (its
// socket, which belongs to the server's I/O context, closed and destroyed while that context was
// still there) and nothing more is posted for it.
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

namespace chorus::server::detail {

// A connection the server can cut loose at stop().
class Detachable {
 public:
  virtual ~Detachable() = default;
  // Closes and destroys the socket; called once the I/O threads have stopped, never concurrently
  // with the connection's own handlers. The client counts as gone.
  virtual void detach() = 0;
};

class ConnectionBook {
 public:
  std::atomic<int> open{0};

  // Runs post() under the book's lock unless the server has stopped; false when it has (post() is
  // then not called). Every hand-off into the I/O context from outside it goes through here, so
  // none can land in a context that no thread runs any more.
  template <class Post>
  bool unless_stopped(Post&& post) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return false;
    post();
    return true;
  }

  using Entry = std::list<std::weak_ptr<Detachable>>::iterator;
  Entry enter(const std::shared_ptr<Detachable>& c) {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.insert(live_.end(), c);
  }
  void leave(Entry e) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(e);
  }

  void mark_stopped() {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  // The connections still alive; the caller detaches them outside the lock (detaching can drop the
  // last reference to another connection, whose destructor leaves the book).
  std::vector<std::shared_ptr<Detachable>> live() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<Detachable>> out;
    for (const auto& w : live_)
      if (auto c = w.lock()) out.push_back(std::move(c));
    return out;
  }

 private:
  std::mutex mu_;
  bool stopped_ = false;
  std::list<std::weak_ptr<Detachable>> live_;
};

}  // namespace chorus::server::detail
