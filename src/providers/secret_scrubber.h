// Keeps the provider's credentials out of every byte a client receives: a server that
// echoes the key it was sent (in an error, a header, a stream event) must not hand it
// to the gateway's clients.
//
// Only the few configured secrets are searched for (no general pattern), so a stream
// piece costs one substring search per secret. A secret cut across two upstream reads is
// caught by holding back the piece's tail when it could be the start of one (at most the
// secret's length - 1 bytes, and only when it matches): the one place where the relay
// does not write everything it has at once.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"

namespace tahua {

class SecretScrubber {
 public:
  static constexpr std::string_view kRedacted = "[redacted]";

  explicit SecretScrubber(const ProviderConfig& provider);

  bool active() const { return count_ > 0; }

  // The next piece of a stream, scrubbed. Returns a view of `in` itself when it holds no
  // secret and ends with no possible start of one (the common case: no copy), else a
  // view of an internal buffer valid until the next call. A held-back tail goes out
  // with the next piece.
  std::string_view scrubPiece(std::string_view in);
  // The stream ended: what is still held back is dropped, not sent (it is the start of a
  // secret, never an event's end, so the stream was cut mid-line anyway).
  void dropHeld() { held_.clear(); }
  bool holding() const { return !held_.empty(); }

  // A whole text (a non-streaming body, a header value), in place. True if it changed.
  bool scrubWhole(std::string& text) const;
  // A header value: unchanged (false) or scrubbed into `out` (true).
  bool scrubValue(std::string_view value, std::string& out) const;

 private:
  bool containsSecret(std::string_view text) const;
  // Where a tail that could begin a secret starts in `text` (text.size() if none).
  std::size_t heldTailStart(std::string_view text) const;

  std::array<std::string_view, 3> secrets_{};
  std::size_t count_ = 0;
  std::string held_;
  std::string out_;
};

}  // namespace tahua
