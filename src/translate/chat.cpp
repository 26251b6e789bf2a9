#include "translate/chat.h"

#include <boost/json/parse.hpp>

#include <random>

#include "core/json_read.h"

namespace tahua {

Error streamEventTooLarge(std::size_t limit) {
  return Error{ErrorKind::UpstreamEventTooLarge, "The upstream sent a stream event or line longer than " +
                                                     std::to_string(limit) + " bytes (server.max_stream_event_bytes)."};
}

std::variant<boost::json::object, Error> parseJsonObject(std::string_view text, std::string_view what) {
  boost::system::error_code ec;
  boost::json::value v = readJson(text, ec);
  if (ec || !v.is_object())
    return Error{ErrorKind::UpstreamBadResponse, "The upstream sent " + std::string(what) + " that is not a JSON object."};
  return std::move(v.as_object());
}

std::string randomId(std::string_view prefix, std::size_t length) {
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string id(prefix);
  id.reserve(prefix.size() + length);
  for (std::size_t i = 0; i < length; ++i) id.push_back(kAlphabet[rng() % kAlphabet.size()]);
  return id;
}

}  // namespace tahua
