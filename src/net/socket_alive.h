// Is an idle kept-alive connection still usable, or did its peer close it meanwhile? One
// non-blocking MSG_PEEK of the socket: the upstream pool (server/upstream_client.cpp) and
// the outbound HTTP client's pool (net/http_client.cpp) ask before reusing one.
#pragma once

#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <cerrno>

namespace tahua {

inline bool socketLooksAlive(boost::asio::ip::tcp::socket& sock, bool tls) {
  if (!sock.is_open()) return false;
  char byte;
  ssize_t n = ::recv(sock.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return false;  // orderly close
  if (n > 0) return tls;     // TLS may have post-handshake records; plain: garbage
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

}  // namespace tahua
