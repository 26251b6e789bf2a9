#include "tokens/token_estimator.h"

#include <boost/json.hpp>

#include <algorithm>
#include <cstring>

namespace tahua {
namespace {

// The estimate is accumulated in quarter tokens so fractional per-character rates stay
// integer arithmetic; it is rounded up once at the end.
constexpr std::int64_t kUnit = 4;

// Rates, calibrated against cl100k_base on ~70 samples: this repository's Markdown and
// C++ (estimates within about -15%..+12% on prose, +15..25% on code and JSON), numbers,
// and short Chinese, Japanese, Korean, Russian, German, French, Spanish, Arabic texts
// (within about ±15%, German -25%). tests/unit/token_estimator_test.cpp keeps a few
// reference counts.
// - An ASCII word is one token up to kShortWordLetters letters (cl100k has whole-word
//   tokens, leading space included, for most common words); longer words are rarer and
//   split, about a token per further 4 letters.
constexpr std::int64_t kShortWordLetters = 7;  // words up to this many letters: 1 token
constexpr std::int64_t kLettersPerExtraToken = 4;
// - cl100k's pre-tokenizer splits digit runs into groups of at most 3.
constexpr std::int64_t kDigitsPerToken = 3;
// - Punctuation: the first of a run is a token; runs merge ("),", "->", "//", "────"),
//   so each further one counts a quarter. Line ends right after punctuation are free
//   (";\n" is one token).
constexpr std::int64_t kFirstSymbolUnits = 4;
constexpr std::int64_t kNextSymbolUnits = 1;
// - CJK: common ideographs are single tokens, rarer ones 2-3 byte-level tokens; 1.25 per
//   ideograph (Chinese measured 1.2-1.3). Kana are frequent enough to merge a little
//   (Japanese measured ~1.0-1.15 per character). Hangul syllables measured ~1.2.
constexpr std::int64_t kHanUnits = 5;
constexpr std::int64_t kKanaUnits = 3;
constexpr std::int64_t kHangulUnits = 5;
// - Other letters: Latin with diacritics, Greek, Cyrillic ~2 per token (Russian measured
//   ~2); Hebrew, Arabic, Indic, Thai and others ~0.75 token each (Arabic measured 0.85;
//   Indic scripts cost more, up to 2-3 per character, and are underestimated).
constexpr std::int64_t kOtherLetterUnits = 2;
constexpr std::int64_t kRareScriptLetterUnits = 3;
// - Symbols beyond ASCII: BMP ones (°, —, …, box drawing) count as punctuation; astral
//   ones (emoji) are 4 UTF-8 bytes and mostly 2-3 byte-level tokens.
constexpr std::int64_t kAstralSymbolUnits = 8;
// - An invalid byte is encoded as a byte-level token.
constexpr std::int64_t kInvalidByteUnits = 4;

// Whitespace: a single space joins the next word's token; a longer run is one token; a
// run of line ends is one token.

enum class Kind { Letter, OtherLetter, Digit, Space, Newline, Symbol, Han, Kana, Hangul, AstralSymbol, None };

Kind classifyNonAscii(char32_t cp) {
  if ((cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0xF900 && cp <= 0xFAFF) ||
      (cp >= 0x20000 && cp <= 0x3FFFF))
    return Kind::Han;
  if ((cp >= 0x3040 && cp <= 0x30FF) || (cp >= 0x31F0 && cp <= 0x31FF) || (cp >= 0xFF66 && cp <= 0xFF9F))
    return Kind::Kana;
  if ((cp >= 0xAC00 && cp <= 0xD7AF) || (cp >= 0x1100 && cp <= 0x11FF) || (cp >= 0x3130 && cp <= 0x318F))
    return Kind::Hangul;
  // Punctuation and symbol blocks; the rest of the BMP below them is mostly letters.
  if ((cp >= 0x80 && cp <= 0xBF) || cp == 0xD7 || cp == 0xF7 || (cp >= 0x2000 && cp <= 0x2BFF) ||
      (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF65) ||
      (cp >= 0xFFF0 && cp <= 0xFFFF) || (cp >= 0xE000 && cp <= 0xF8FF))
    return Kind::Symbol;
  if (cp >= 0x10000) return Kind::AstralSymbol;  // emoji and the like (astral Han handled above)
  return Kind::OtherLetter;
}

Kind classifyAscii(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return Kind::Letter;
  if (c >= '0' && c <= '9') return Kind::Digit;
  if (c == ' ' || c == '\t' || c == '\f' || c == '\v') return Kind::Space;
  if (c == '\n' || c == '\r') return Kind::Newline;
  return Kind::Symbol;  // punctuation and control characters
}

// Decodes one UTF-8 sequence at p (p < end). Returns its length, 0 if invalid (the
// caller then counts one byte). Rejects overlong forms, surrogates and > U+10FFFF.
std::size_t decodeUtf8(const unsigned char* p, const unsigned char* end, char32_t& cp) {
  unsigned char b0 = p[0];
  std::size_t len;
  char32_t min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (static_cast<std::size_t>(end - p) < len) return 0;
  for (std::size_t i = 1; i < len; ++i) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

class Estimator {
 public:
  void add(Kind kind) {
    if (kind != run_) close();
    run_ = kind;
    ++run_len_;
  }
  // Letters of one word: ASCII and other scripts mix in one run ("café", "naïve").
  void addAsciiLetter() {
    if (run_ != Kind::Letter) close();
    run_ = Kind::Letter;
    ++run_len_;
  }
  void addOtherLetter(std::int64_t units) {
    if (run_ != Kind::Letter) close();
    run_ = Kind::Letter;
    other_units_ += units;
  }
  void addSymbol() {
    if (run_ != Kind::Symbol) close();
    run_ = Kind::Symbol;
    ++run_len_;
  }
  void addFixed(std::int64_t units) {
    close();
    units_ += units;
  }
  std::int64_t finish() {
    close();
    return (units_ + kUnit - 1) / kUnit;
  }

 private:
  void close() {
    switch (run_) {
      case Kind::Letter: {
        std::int64_t units = 0;
        if (run_len_ > 0)
          units = kUnit + std::max<std::int64_t>(0, run_len_ - kShortWordLetters) * kUnit / kLettersPerExtraToken;
        units += other_units_;
        units_ += std::max(units, kUnit);  // at least one token per word
        break;
      }
      case Kind::Digit: units_ += (run_len_ + kDigitsPerToken - 1) / kDigitsPerToken * kUnit; break;
      case Kind::Symbol:
        if (run_len_ > 0) units_ += kFirstSymbolUnits + (run_len_ - 1) * kNextSymbolUnits;
        break;
      // One space joins the next word's token; a longer run (indentation) is one token.
      case Kind::Space: units_ += run_len_ >= 2 ? kUnit : 0; break;
      // cl100k's pre-tokenizer glues line ends to the punctuation before them (";\n").
      case Kind::Newline: units_ += prev_run_ == Kind::Symbol ? 0 : kUnit; break;
      default: break;
    }
    prev_run_ = run_;
    run_ = Kind::None;
    run_len_ = 0;
    other_units_ = 0;
  }

  std::int64_t units_ = 0;
  Kind run_ = Kind::None;       // the run being accumulated
  Kind prev_run_ = Kind::None;  // the run closed just before it
  std::int64_t run_len_ = 0;
  std::int64_t other_units_ = 0;  // letters beyond ASCII in the current word
};

std::int64_t estimate(std::string_view text) {
  Estimator est;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    if (*p < 0x80) {
      Kind k = classifyAscii(*p);
      if (k == Kind::Letter) {
        est.addAsciiLetter();
      } else if (k == Kind::Symbol) {
        // "don't" / "we're": the apostrophe is part of the suffix token, not its own.
        bool apostrophe_in_word = *p == '\'' && p + 1 < end && classifyAscii(p[1]) == Kind::Letter &&
                                  p > reinterpret_cast<const unsigned char*>(text.data()) &&
                                  classifyAscii(p[-1]) == Kind::Letter;
        if (apostrophe_in_word) est.add(Kind::Space);  // a break between word runs, costing nothing
        else est.addSymbol();
      } else {
        est.add(k);
      }
      ++p;
      continue;
    }
    char32_t cp = 0;
    std::size_t len = decodeUtf8(p, end, cp);
    if (len == 0) {
      est.addFixed(kInvalidByteUnits);
      ++p;
      continue;
    }
    p += len;
    switch (classifyNonAscii(cp)) {
      // Latin supplements, Greek, Cyrillic, Armenian are frequent in the vocabulary; the
      // scripts after them (Hebrew, Arabic, Indic, Thai...) much less.
      case Kind::OtherLetter: est.addOtherLetter(cp < 0x0590 ? kOtherLetterUnits : kRareScriptLetterUnits); break;
      case Kind::Han: est.addFixed(kHanUnits); break;
      case Kind::Kana: est.addFixed(kKanaUnits); break;
      case Kind::Hangul: est.addFixed(kHangulUnits); break;
      case Kind::AstralSymbol: est.addFixed(kAstralSymbolUnits); break;
      default: est.addSymbol(); break;
    }
  }
  return est.finish();
}

}  // namespace

std::int64_t EstimatingTokenCounter::count(std::string_view text) const { return estimate(text); }

const TokenCounter& defaultTokenCounter() {
  static const EstimatingTokenCounter counter;
  return counter;
}

// ---------------------------------------------------------------------------------
// Requests

namespace {

namespace json = boost::json;

// Framing the model sees around each message (OpenAI's published accounting for its chat
// models: <|start|>{role}<|message|>...<|end|> is 3 tokens beyond the role and content,
// a `name` adds 1, and the reply is primed with 3 more). Anthropic's framing is similar
// in size; the same numbers are used for it.
constexpr std::int64_t kPerMessage = 3;
constexpr std::int64_t kPerName = 1;
constexpr std::int64_t kReplyPriming = 3;
// A tool call is rendered with a little syntax around its name and arguments.
constexpr std::int64_t kPerToolCall = 3;
// Images are not text; OpenAI bills a 1024x1024 image at detail "high" 765 tokens
// (85 + 4 tiles x 170) and any image at detail "low" 85. Audio and files get the
// high-detail figure too: an order of magnitude, not a measurement.
constexpr std::int64_t kOpenAIImageTokens = 765;
constexpr std::int64_t kOpenAILowDetailImageTokens = 85;
// Anthropic: about width*height/750 tokens, ~1600 for an image at the size the API
// scales down to (1568 px on the long edge). A PDF document's pages are unknown here:
// counted as one such page.
constexpr std::int64_t kAnthropicImageTokens = 1600;
constexpr std::int64_t kAnthropicDocumentTokens = 1600;
// Anthropic adds a tool-use system prompt when tools are given (~300-350 tokens,
// depending on model and tool_choice; the larger published figure is used).
constexpr std::int64_t kAnthropicToolPrompt = 346;

const json::value* member(const json::value& v, std::string_view key) {
  const json::object* o = v.if_object();
  return o ? o->if_contains(key) : nullptr;
}

std::int64_t countString(const json::value* v, const TokenCounter& counter) {
  return v && v->is_string() ? counter.count(v->get_string()) : 0;
}

// Tool schemas and arguments are counted as compact JSON: what the model reads is close to
// it (OpenAI renders schemas in a terser TypeScript-like form, so this errs high).
std::int64_t countJson(const json::value* v, const TokenCounter& counter) {
  if (!v || v->is_null()) return 0;
  if (v->is_string()) return counter.count(v->get_string());
  return counter.count(json::serialize(*v));
}

std::int64_t chatContent(const json::value* content, const TokenCounter& counter) {
  if (!content) return 0;
  if (content->is_string()) return counter.count(content->get_string());
  std::int64_t n = 0;
  if (const json::array* parts = content->if_array()) {
    for (const json::value& part : *parts) {
      const json::value* type = member(part, "type");
      if (!type || !type->is_string()) continue;
      const json::string& t = type->get_string();
      if (t == "text") {
        n += countString(member(part, "text"), counter);
      } else if (t == "refusal") {
        n += countString(member(part, "refusal"), counter);
      } else if (t == "image_url") {
        const json::value* image = member(part, "image_url");
        const json::value* detail = image ? member(*image, "detail") : nullptr;
        bool low = detail && detail->is_string() && detail->get_string() == "low";
        n += low ? kOpenAILowDetailImageTokens : kOpenAIImageTokens;
      } else {
        n += kOpenAIImageTokens;  // input_audio, file
      }
    }
  }
  return n;
}

std::int64_t anthropicBlocks(const json::value* content, const TokenCounter& counter, int depth);

std::int64_t anthropicBlock(const json::value& block, const TokenCounter& counter, int depth) {
  const json::value* type = member(block, "type");
  if (!type || !type->is_string()) return 0;
  const json::string& t = type->get_string();
  if (t == "text") return countString(member(block, "text"), counter);
  if (t == "image") return kAnthropicImageTokens;
  if (t == "document") {
    const json::value* source = member(block, "source");
    const json::value* source_type = source ? member(*source, "type") : nullptr;
    if (source_type && source_type->is_string() && source_type->get_string() == "text")
      return countString(member(*source, "data"), counter);
    return kAnthropicDocumentTokens;
  }
  if (t == "tool_use" || t == "server_tool_use")
    return kPerToolCall + countString(member(block, "name"), counter) + countJson(member(block, "input"), counter);
  if (t == "tool_result") {
    if (depth > 0) return 0;  // results do not nest; a hostile body could try
    return kPerToolCall + anthropicBlocks(member(block, "content"), counter, depth + 1);
  }
  if (t == "thinking") return countString(member(block, "thinking"), counter);
  return 0;  // redacted_thinking and unknown blocks: nothing readable to count
}

std::int64_t anthropicBlocks(const json::value* content, const TokenCounter& counter, int depth) {
  if (!content) return 0;
  if (content->is_string()) return counter.count(content->get_string());
  std::int64_t n = 0;
  if (const json::array* blocks = content->if_array())
    for (const json::value& block : *blocks) n += anthropicBlock(block, counter, depth);
  return n;
}

}  // namespace

std::int64_t estimateChatTokens(const json::object& request, const TokenCounter& counter) {
  std::int64_t n = kReplyPriming;
  if (const json::value* messages = request.if_contains("messages"); messages && messages->is_array()) {
    for (const json::value& msg : messages->get_array()) {
      if (!msg.is_object()) continue;
      n += kPerMessage;
      n += countString(member(msg, "role"), counter);
      n += chatContent(member(msg, "content"), counter);
      if (const json::value* name = member(msg, "name"); name && name->is_string())
        n += kPerName + counter.count(name->get_string());
      if (const json::value* calls = member(msg, "tool_calls"); calls && calls->is_array()) {
        for (const json::value& call : calls->get_array()) {
          const json::value* fn = member(call, "function");
          if (!fn) continue;
          n += kPerToolCall + countString(member(*fn, "name"), counter) + countJson(member(*fn, "arguments"), counter);
        }
      }
      if (const json::value* fc = member(msg, "function_call"))  // the legacy single call
        n += kPerToolCall + countString(member(*fc, "name"), counter) + countJson(member(*fc, "arguments"), counter);
    }
  }
  if (const json::value* tools = request.if_contains("tools"); tools && tools->is_array()) {
    for (const json::value& tool : tools->get_array()) {
      const json::value* fn = member(tool, "function");
      n += countJson(fn ? fn : &tool, counter);
    }
  }
  if (const json::value* functions = request.if_contains("functions"); functions && functions->is_array())
    for (const json::value& fn : functions->get_array()) n += countJson(&fn, counter);
  return n;
}

std::int64_t estimateChatTokens(const json::object& request) {
  return estimateChatTokens(request, defaultTokenCounter());
}

std::int64_t estimateAnthropicTokens(const json::object& request, const TokenCounter& counter) {
  std::int64_t n = kReplyPriming;
  if (const json::value* system = request.if_contains("system")) n += anthropicBlocks(system, counter, 0);
  if (const json::value* messages = request.if_contains("messages"); messages && messages->is_array()) {
    for (const json::value& msg : messages->get_array()) {
      if (!msg.is_object()) continue;
      n += kPerMessage + countString(member(msg, "role"), counter);
      n += anthropicBlocks(member(msg, "content"), counter, 0);
    }
  }
  if (const json::value* tools = request.if_contains("tools"); tools && tools->is_array() && !tools->get_array().empty()) {
    n += kAnthropicToolPrompt;
    for (const json::value& tool : tools->get_array()) n += countJson(&tool, counter);
  }
  return n;
}

std::int64_t estimateAnthropicTokens(const json::object& request) {
  return estimateAnthropicTokens(request, defaultTokenCounter());
}

std::int64_t estimateStreamedTokens(std::string_view piece, const TokenCounter& counter) {
  static constexpr std::string_view kKeys[] = {"content", "text", "delta", "arguments", "partial_json", "thinking", "refusal"};
  std::int64_t tokens = 0;
  std::size_t at = 0;
  // Each `":"` (a key and a string value) is found from its colon: a chunk has a few
  // colons but dozens of quotes, and this runs on every piece of a metered stream.
  while (at < piece.size()) {
    const void* hit = std::memchr(piece.data() + at, ':', piece.size() - at);
    if (!hit) break;
    const std::size_t colon = static_cast<std::size_t>(static_cast<const char*>(hit) - piece.data());
    at = colon + 1;
    if (colon < 2 || colon + 1 >= piece.size() || piece[colon - 1] != '"' || piece[colon + 1] != '"') continue;
    at = colon + 2;
    // The key is the quoted word that ends at the colon: compared where it lies.
    const std::string_view before = piece.substr(0, colon - 1);
    const auto is_key = [&](std::string_view k) {
      return before.size() > k.size() && before.ends_with(k) && before[before.size() - k.size() - 1] == '"';
    };
    if (std::none_of(std::begin(kKeys), std::end(kKeys), is_key)) continue;
    // The value runs to the first quote not escaped (an odd run of backslashes escapes it).
    std::size_t end = at;
    for (;;) {
      end = piece.find('"', end);
      if (end == std::string_view::npos) break;
      std::size_t slashes = 0;
      while (end - slashes > at && piece[end - slashes - 1] == '\\') ++slashes;
      if (slashes % 2 == 0) break;
      ++end;
    }
    const std::size_t stop = end == std::string_view::npos ? piece.size() : end;
    tokens += counter.count(piece.substr(at, stop - at));
    at = stop;
  }
  return tokens;
}

}  // namespace tahua
