// How the HTTP server hands a connection over to a WebSocket (http_server.cpp → websocket.cpp).
#pragma once

#include <memory>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "server/connection_book.h"
#include "server/http_server.h"
#include "server/websocket.h"

namespace chorus::server::detail {

// Takes the connection (and bytes already read past the request) over; is in the server's `book`
// while it lives. Not started: WebSocket::start() does the handshake.
std::shared_ptr<WebSocket> make_websocket(boost::beast::tcp_stream&& stream, boost::beast::flat_buffer&& buffer, Request&& req,
                                          const HttpOptions& options, std::shared_ptr<ConnectionBook> book);

}  // namespace chorus::server::detail
