// Is an idle kept-alive connection still usable, or did its peer close it meanwhile? One
// non-blocking MSG_PEEK of the socket: the upstream pool (server/upstream_client.cpp) and
// the outbound HTTP client's pool (net/http_client.cpp) ask before reusing one.
//
// Bytes waiting on an idle connection were not asked for. `bytes_ok`: they do not make it
// dead (the upstream pool's TLS connections: a server may send post-handshake records).
// Otherwise they do: the outbound client reads a response to its end, TLS session tickets
// included, so what comes after is garbage or, mostly, a TLS close_notify ahead of the
// server's FIN, which a MSG_PEEK cannot see past.
#pragma once

#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <cerrno>

namespace tahua {

inline bool socketLooksAlive(boost::asio::ip::tcp::socket& sock, bool bytes_ok) {
  if (!sock.is_open()) return false;
  char byte;
  ssize_t n = ::recv(sock.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return false;  // orderly close
  if (n > 0) return bytes_ok;
  return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

}  // namespace tahua
