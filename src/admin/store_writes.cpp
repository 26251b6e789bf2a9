#include "admin/store_writes.h"

namespace tahua::admin_store {

boost::asio::awaitable<WriteResult> put(StateStore& store, std::string_view ns, std::string id, std::string json) {
  std::function<void(std::function<void(WriteResult)>)> start = [&store, ns, id, json](std::function<void(WriteResult)> done) {
    store.putRecord(ns, id, json, std::move(done));
  };
  auto op = await<WriteResult>(std::move(start));
  WriteResult r = co_await std::move(op);
  co_return r;
}

boost::asio::awaitable<WriteResult> erase(StateStore& store, std::string_view ns, std::string id) {
  std::function<void(std::function<void(WriteResult)>)> start = [&store, ns, id](std::function<void(WriteResult)> done) {
    store.eraseRecord(ns, id, std::move(done));
  };
  auto op = await<WriteResult>(std::move(start));
  WriteResult r = co_await std::move(op);
  co_return r;
}

}  // namespace tahua::admin_store
