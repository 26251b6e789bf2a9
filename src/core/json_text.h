// JSON text with numbers as a person writes them. Boost.JSON 1.81 writes every double in
// scientific notation ("4.3333333333333335E-1" for 0.4333…, "5E-1" for 0.5): valid JSON,
// but what an operator reads in an admin answer or a template renders into a prompt.
// Here a double is its shortest round-trip decimal (std::to_chars): 0.43333333333333335,
// 0.5, 1234.5; integers and everything else as Boost.JSON writes them.
#pragma once

#include <string>

#include <boost/json/fwd.hpp>

namespace tahua {

std::string jsonText(const boost::json::value& v);
// One number alone (a template's `number` variable): "0.5", "1234.5", "3".
std::string numberText(double d);

}  // namespace tahua
