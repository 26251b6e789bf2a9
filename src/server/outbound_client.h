// A one-off HTTP/1.1 call from a worker's event loop, for filters that call out (a
// plugin's tahua.http): resolve, connect (TLS for https, checked against the system's
// CAs and the host's name), send, and read the answer, all under one deadline, with the
// answer's body bounded. A new connection per call: such calls go to a few internal
// services (an identity service, a policy store), not at the upstreams' rate.
#pragma once

#include <functional>

#include "http/outbound_call.h"

namespace boost::asio {
class io_context;
}

namespace tahua {

// `done` runs on `io`'s thread, once.
void fetchOutbound(boost::asio::io_context& io, OutboundRequest request, std::function<void(OutboundResponse)> done);

}  // namespace tahua
