#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <memory>

namespace boost::asio::ssl {
class context;
}

namespace tahua {

class SessionHost;

// Serves one accepted client connection on the worker's thread until it closes.
// With `tls` set, the connection is TLS (handshake first). An `admin` connection (the
// admin listener) serves only /admin/v1/... and /healthz; public ones never serve those.
void startSession(SessionHost& worker, boost::asio::ip::tcp::socket socket, std::shared_ptr<boost::asio::ssl::context> tls,
                  bool admin = false);

}  // namespace tahua
