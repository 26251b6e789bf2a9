#include "providers/secret_scrubber.h"

#include <algorithm>
#include <cstring>

namespace tahua {

SecretScrubber::SecretScrubber(const ProviderConfig& provider) {
  for (const std::string* secret : {&provider.api_key, &provider.aws.secret_access_key, &provider.aws.session_token}) {
    // Shorter values are placeholders in tests and configs, and would match everywhere.
    if (secret->size() >= 4) secrets_[count_++] = *secret;
  }
}

bool SecretScrubber::containsSecret(std::string_view text) const {
  for (std::size_t i = 0; i < count_; ++i)
    if (text.find(secrets_[i]) != std::string_view::npos) return true;
  return false;
}

std::size_t SecretScrubber::heldTailStart(std::string_view text) const {
  std::size_t start = text.size();
  for (std::size_t i = 0; i < count_; ++i) {
    const std::string_view s = secrets_[i];
    // Candidates: positions in the last (|s| - 1) bytes where s's first byte occurs; the
    // earliest one whose rest is a prefix of s holds the longest tail.
    const std::size_t window = std::min(text.size(), s.size() - 1);
    for (std::size_t pos = text.size() - window; pos < start; ++pos) {
      const void* hit = std::memchr(text.data() + pos, s.front(), text.size() - pos);
      if (!hit) break;
      pos = static_cast<std::size_t>(static_cast<const char*>(hit) - text.data());
      if (pos >= start) break;
      if (s.starts_with(text.substr(pos))) {
        start = pos;
        break;
      }
    }
  }
  return start;
}

std::string_view SecretScrubber::scrubPiece(std::string_view in) {
  if (count_ == 0) return in;
  if (held_.empty() && !containsSecret(in)) {
    const std::size_t hold = heldTailStart(in);
    if (hold == in.size()) return in;
    held_.assign(in.substr(hold));
    return in.substr(0, hold);
  }
  out_.assign(held_);
  held_.clear();
  out_.append(in);
  scrubWhole(out_);
  const std::size_t hold = heldTailStart(out_);
  held_.assign(std::string_view(out_).substr(hold));
  return std::string_view(out_).substr(0, hold);
}

bool SecretScrubber::scrubWhole(std::string& text) const {
  bool changed = false;
  for (std::size_t i = 0; i < count_; ++i) {
    const std::string_view s = secrets_[i];
    for (auto at = text.find(s); at != std::string::npos; at = text.find(s, at + kRedacted.size())) {
      text.replace(at, s.size(), kRedacted);
      changed = true;
    }
  }
  return changed;
}

bool SecretScrubber::scrubValue(std::string_view value, std::string& out) const {
  if (!containsSecret(value)) return false;
  out.assign(value);
  scrubWhole(out);
  return true;
}

}  // namespace tahua
