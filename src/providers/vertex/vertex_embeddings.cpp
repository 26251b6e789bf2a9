#include "providers/vertex/vertex_embeddings.h"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <bit>
#include <cstring>

#include "core/base64.h"
#include "core/json_read.h"
#include "providers/translation.h"
#include "translate/gemini_codec.h"

namespace tahua {
namespace {

namespace bj = boost::json;

// What one request may carry: Vertex takes at most 250 instances (gemini-embedding-001 one).
constexpr std::size_t kMaxInputs = 2048;

Error invalidAt(std::string param, std::string message) {
  Error e{ErrorKind::InvalidRequest, std::move(message)};
  e.param = std::move(param);
  return e;
}

class EmbeddingsTranslator final : public ResponseTranslator {
 public:
  EmbeddingsTranslator(bool base64, const ProviderConfig& provider) : base64_(base64), provider_(provider) {}

  void onResponseHead(ResponseHead& head, RequestContext&) override {
    head.event_stream = false;
    head.content_type = "application/json";
  }
  std::string_view onStreamBytes(std::string_view bytes, bool, RequestContext&) override { return bytes; }
  std::string streamErrorEvent(const Error& error) const override { return error.toOpenAIStreamEvent(); }

  void onBody(std::string& body, RequestContext& ctx) override {
    if (ctx.status < 200 || ctx.status >= 300) {
      // Google's error shape, re-shaped as OpenAI's (the status stays Vertex's).
      UpstreamErrorInfo info = makeGeminiCodec()->decodeError(ctx.status, body);
      info.message = scrubSecrets(std::move(info.message), provider_);
      body = openAIChatInbound().encodeUpstreamError(info);
      return;
    }
    boost::system::error_code ec;
    const bj::value v = readJson(body, ec);
    const bj::value* predictions = !ec && v.is_object() ? v.get_object().if_contains("predictions") : nullptr;
    if (!predictions || !predictions->is_array()) return bad(body, ctx, "an answer without predictions");
    bj::array data;
    std::int64_t tokens = 0;
    for (std::size_t i = 0; i < predictions->get_array().size(); ++i) {
      const bj::value& p = predictions->get_array()[i];
      const bj::object* embeddings = p.is_object() && p.get_object().contains("embeddings") && p.get_object().at("embeddings").is_object()
                                         ? &p.get_object().at("embeddings").get_object()
                                         : nullptr;
      const bj::value* values = embeddings ? embeddings->if_contains("values") : nullptr;
      if (!values || !values->is_array()) return bad(body, ctx, "a prediction without embeddings.values");
      if (const bj::value* st = embeddings->if_contains("statistics"); st && st->is_object())
        if (const bj::value* n = st->get_object().if_contains("token_count"); n && n->is_number())
          tokens += static_cast<std::int64_t>(n->to_number<double>());
      bj::value vector;
      if (base64_) {
        // Little-endian float32s, as OpenAI sends them.
        static_assert(std::endian::native == std::endian::little);
        std::string bytes;
        bytes.reserve(values->get_array().size() * 4);
        for (const bj::value& x : values->get_array()) {
          if (!x.is_number()) return bad(body, ctx, "a non-numeric embedding value");
          const float f = static_cast<float>(x.to_number<double>());
          char raw[4];
          std::memcpy(raw, &f, 4);
          bytes.append(raw, 4);
        }
        vector = bj::string(base64Encode(bytes));
      } else {
        bj::array numbers;
        numbers.reserve(values->get_array().size());
        for (const bj::value& x : values->get_array()) {
          if (!x.is_number()) return bad(body, ctx, "a non-numeric embedding value");
          numbers.push_back(x.to_number<double>());
        }
        vector = std::move(numbers);
      }
      data.push_back(bj::object{{"object", "embedding"}, {"index", i}, {"embedding", std::move(vector)}});
    }
    ctx.usage.prompt_tokens = tokens;
    ctx.usage.completion_tokens = 0;
    ctx.usage.total_tokens = tokens;
    body = bj::serialize(bj::object{{"object", "list"},
                                    {"data", std::move(data)},
                                    {"model", ctx.facts.model},
                                    {"usage", bj::object{{"prompt_tokens", tokens}, {"total_tokens", tokens}}}});
  }

 private:
  static void bad(std::string& body, RequestContext& ctx, std::string_view what) {
    Error e{ErrorKind::UpstreamBadResponse, "Vertex AI sent " + std::string(what) + "."};
    ctx.status = e.httpStatus();
    body = ctx.errorBody(e);
    ctx.fail(std::move(e));
  }

  bool base64_;
  const ProviderConfig& provider_;
};

}  // namespace

std::variant<std::string, Error> vertexEmbeddingsBody(std::string_view openai_body) {
  boost::system::error_code ec;
  const bj::value v = readJson(openai_body, ec);
  if (ec || !v.is_object()) return Error{ErrorKind::InvalidJson, "The request body is not a JSON object."};
  const bj::object& o = v.get_object();
  const bj::value* input = o.if_contains("input");
  if (!input) return invalidAt("input", "input: Field required");
  bj::array instances;
  const auto add = [&](const bj::value& item, std::string param) -> std::optional<Error> {
    if (!item.is_string())
      return invalidAt(std::move(param), "Vertex AI embeds text: each input must be a string (token arrays are not supported).");
    instances.push_back(bj::object{{"content", item.get_string()}});
    return std::nullopt;
  };
  if (input->is_array()) {
    const bj::array& items = input->get_array();
    if (items.empty()) return invalidAt("input", "input must not be empty.");
    if (items.size() > kMaxInputs) return invalidAt("input", "input holds more than " + std::to_string(kMaxInputs) + " items.");
    for (std::size_t i = 0; i < items.size(); ++i)
      if (auto err = add(items[i], "input[" + std::to_string(i) + "]")) return std::move(*err);
  } else if (auto err = add(*input, "input")) {
    return std::move(*err);
  }
  bj::object out{{"instances", std::move(instances)}};
  if (const bj::value* d = o.if_contains("dimensions"); d && !d->is_null()) {
    if (!d->is_int64() || d->get_int64() < 1 || d->get_int64() > 65536)
      return invalidAt("dimensions", "dimensions must be an integer from 1 to 65536.");
    out["parameters"] = bj::object{{"outputDimensionality", d->get_int64()}};
  }
  if (const bj::value* f = o.if_contains("encoding_format"); f && !f->is_null()) {
    if (!f->is_string() || (f->get_string() != "float" && f->get_string() != "base64"))
      return invalidAt("encoding_format", "encoding_format must be float or base64.");
  }
  return bj::serialize(out);
}

bool wantsBase64Embeddings(std::string_view openai_body) {
  boost::system::error_code ec;
  const bj::value v = readJson(openai_body, ec);
  if (ec || !v.is_object()) return false;
  const bj::value* f = v.get_object().if_contains("encoding_format");
  return f && f->is_string() && f->get_string() == "base64";
}

std::unique_ptr<ResponseTranslator> makeVertexEmbeddingsTranslator(bool base64, const ProviderConfig& provider) {
  return std::make_unique<EmbeddingsTranslator>(base64, provider);
}

}  // namespace tahua
