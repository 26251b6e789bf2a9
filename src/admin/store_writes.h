// The admin API's way to wait for the state store from a coroutine: the store answers
// through a callback, possibly on another thread; these resume the coroutine on its own
// executor with the result.
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "store/state_store.h"

namespace tahua::admin_store {

// (GCC 12 miscompiles temporaries with destructors inside a co_await expression: every
// awaitable here is a named local.)
template <class Result>
boost::asio::awaitable<Result> await(std::function<void(std::function<void(Result)>)> start) {
  namespace asio = boost::asio;
  auto ex = co_await asio::this_coro::executor;
  auto initiate = [start = std::move(start), ex](auto handler) mutable {
    auto h = std::make_shared<decltype(handler)>(std::move(handler));
    start([h, ex](Result r) { asio::post(ex, [h, r = std::move(r)]() mutable { std::move (*h)(std::move(r)); }); });
  };
  auto op = asio::async_initiate<const asio::use_awaitable_t<>&, void(Result)>(std::move(initiate), asio::use_awaitable);
  Result r = co_await std::move(op);
  co_return r;
}

// A record written or erased durably: nullopt, or the store's error text.
using WriteResult = std::optional<std::string>;
boost::asio::awaitable<WriteResult> put(StateStore& store, std::string_view ns, std::string id, std::string json);
boost::asio::awaitable<WriteResult> erase(StateStore& store, std::string_view ns, std::string id);

}  // namespace tahua::admin_store
