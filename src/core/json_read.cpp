#include "core/json_read.h"

#include <boost/json/parse.hpp>

namespace tahua {

boost::json::value readJson(std::string_view text, boost::system::error_code& ec, boost::json::storage_ptr sp) {
  boost::json::parse_options options;
  options.max_depth = kJsonReadDepth;
  return boost::json::parse(text, ec, std::move(sp), options);
}

}  // namespace tahua
