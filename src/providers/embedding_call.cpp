#include "providers/embedding_call.h"

#include <boost/json.hpp>
#include <simdjson.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/base64.h"

namespace tahua {
namespace {

namespace bj = boost::json;

}  // namespace

std::string embeddingRequestBody(std::string_view model, const std::vector<std::string>& inputs) {
  bj::object body;
  body["model"] = model;
  body["encoding_format"] = "base64";
  if (inputs.size() == 1) {
    body["input"] = inputs.front();
  } else {
    bj::array in;
    for (const auto& s : inputs) in.emplace_back(s);
    body["input"] = std::move(in);
  }
  return bj::serialize(body);
}

std::vector<std::vector<float>> embeddingsOf(const OutboundResponse& answer, std::size_t count) {
  // simdjson: an answer is mostly numbers (two 1,536-float vectors are ~30 KB of text),
  // which a DOM parser reads several times slower.
  using namespace simdjson;
  std::vector<std::vector<float>> out;
  if (answer.status != 200 || count == 0) return out;
  thread_local ondemand::parser parser;
  const padded_string padded(answer.body);
  ondemand::document doc;
  ondemand::array data;
  if (parser.iterate(padded).get(doc) || doc["data"].get_array().get(data)) return out;
  out.resize(count);
  std::size_t n = 0;
  for (auto item : data) {
    ondemand::object o;
    if (n >= count || item.get_object().get(o)) return {};
    std::size_t at = n++;
    std::vector<float> v;
    bool seen = false;
    for (auto field : o) {
      std::string_view key;
      if (field.unescaped_key().get(key)) return {};
      if (key == "index") {
        std::int64_t i = 0;
        if (field.value().get_int64().get(i) || i < 0 || static_cast<std::size_t>(i) >= count) return {};
        at = static_cast<std::size_t>(i);
      } else if (key == "embedding") {
        ondemand::value value;
        if (field.value().get(value)) return {};
        std::string_view text;
        if (value.get_string().get(text) == SUCCESS) {
          // encoding_format base64: little-endian float32s.
          auto bytes = base64Decode(text);
          if (!bytes || bytes->size() % 4 != 0 || bytes->size() / 4 > 65536) return {};
          v.resize(bytes->size() / 4);
          if constexpr (std::endian::native == std::endian::little) {
            std::memcpy(v.data(), bytes->data(), bytes->size());
          } else {
            for (std::size_t k = 0; k < v.size(); ++k) {
              std::uint32_t bits = 0;
              for (int b = 3; b >= 0; --b) bits = bits << 8 | static_cast<unsigned char>((*bytes)[k * 4 + static_cast<std::size_t>(b)]);
              std::memcpy(&v[k], &bits, 4);
            }
          }
          for (float f : v)
            if (!std::isfinite(f)) return {};
        } else {
          ondemand::array numbers;
          if (value.get_array().get(numbers)) return {};
          for (auto x : numbers) {
            double f = 0;
            if (v.size() >= 65536 || x.get_double().get(f) || !std::isfinite(f)) return {};
            v.push_back(static_cast<float>(f));
          }
        }
        seen = true;
      }
    }
    if (!seen || v.empty() || !out[at].empty()) return {};
    out[at] = std::move(v);
  }
  if (n != count) return {};
  for (const auto& v : out)
    if (v.size() != out[0].size()) return {};
  return out;
}

double cosineSimilarity(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size() || a.empty()) return 0;
  double dot = 0, na = 0, nb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    dot += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  if (na == 0 || nb == 0) return 0;
  return dot / (std::sqrt(na) * std::sqrt(nb));
}

}  // namespace tahua
