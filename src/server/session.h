#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <memory>

namespace boost::asio::ssl {
class context;
}

namespace tahua {

class Worker;

// Serves one accepted client connection on the worker's thread until it closes.
// With `tls` set, the connection is TLS (handshake first).
void startSession(Worker& worker, boost::asio::ip::tcp::socket socket, std::shared_ptr<boost::asio::ssl::context> tls);

}  // namespace tahua
