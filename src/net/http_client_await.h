// HttpClient::fetch as an awaitable, for a coroutine on the client's io_context (the
// Kubernetes client's). Asio's headers come with it, so only such callers include it.
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <memory>

#include "net/http_client.h"

namespace tahua {

inline boost::asio::awaitable<OutboundResponse> fetchAwaitable(HttpClient& client, OutboundRequest request) {
  return boost::asio::async_initiate<const boost::asio::use_awaitable_t<>, void(OutboundResponse)>(
      [&client](auto handler, OutboundRequest r) {
        // fetch() takes a std::function, which must be copyable; the handler is not.
        auto held = std::make_shared<decltype(handler)>(std::move(handler));
        client.fetch(std::move(r), [held](OutboundResponse res) { std::move(*held)(std::move(res)); });
      },
      boost::asio::use_awaitable, std::move(request));
}

}  // namespace tahua
