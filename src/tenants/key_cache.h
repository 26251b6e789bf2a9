// A worker's cache of the API keys it has already verified, so that a key seen before
// is found without its SHA-256 (~3.0k instructions under callgrind; the tag below ~0.2k).
//
// What an entry holds: the key's tag, a 128-bit SipHash-2-4 (libsodium's
// crypto_shorthash_siphashx24) of the presented bytes under a secret drawn at random once
// per process, and
// the key it was found to be (a pointer into the table's directory). Never the key's
// bytes: what the cache keeps is worthless without the secret, which never leaves the
// process's memory; keys at rest stay SHA-256 digests (config, store, admin API).
//
// Why a hit may be trusted: an entry is only made after the SHA-256 lookup found the key,
// and a hit needs all 128 bits of the tag to match, not only the 64 that choose the slot:
// the other 64 are the independent second check (with a PRF's outputs, its two halves are
// independent). For a key to pass as another, a client must present bytes whose tag under
// a secret it does not know equals a cached key's: with q guesses against n entries, a
// chance of at most q·n/2^128 (2^50 guesses against 4,096 entries: 2^-66): the bar of
// guessing a key of 128 random bits outright. Lower than the SHA-256 lookup's alone (and
// than the admin API's keys, 192 random bits), still far out of reach. Comparing a stored
// SHA-256 on a hit would need the SHA-256 the cache avoids.
//
// Lifetime and revocation: a cache belongs to one KeyTable (one directory snapshot of one
// worker, see key_table.h). A revocation, a new key or a config reload publishes a new
// directory; each worker then builds a new filter chain with a new table and an empty
// cache, so no entry outlives the snapshot it was verified against: revocation takes
// effect exactly as before the cache. An entry's key still has its expiry checked on
// every request (by the auth link). A generation tag per entry would add nothing: the
// table, its directory and its cache are replaced together.
//
// Bounded: a fixed number of slots (a power of two, 4,096 by default, allocated at the
// first insertion: 96 KiB a worker), direct-mapped by the tag's low bits; an insertion
// replaces whatever was in its slot (a key pushed out costs one SHA-256 again). Only keys
// found in the table are inserted: unknown keys (a guessing client) never push verified
// ones out. Not thread-safe: one worker's, no locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace tahua {

struct KeyTag {
  std::uint64_t lo = 0;  // chooses the slot
  std::uint64_t hi = 0;  // the second check
  bool operator==(const KeyTag&) const = default;
};

class KeyCache {
 public:
  static constexpr std::size_t kDefaultSlots = 4096;

  explicit KeyCache(std::size_t slots = kDefaultSlots);

  // The keyed hash of `key` under this process's secret (per-thread OpenSSL context).
  static KeyTag tag(std::string_view key);

  // The key cached under `tag` (all 128 bits equal), or null.
  const ApiKeyConfig* find(const KeyTag& tag) const;
  // Caches `key` (found by its SHA-256) under `tag`, replacing its slot's entry.
  void insert(const KeyTag& tag, const ApiKeyConfig* key);
  void clear();

  std::size_t slots() const { return mask_ + 1; }
  std::size_t size() const;  // entries in use (for tests)

 private:
  struct Entry {
    KeyTag tag;
    const ApiKeyConfig* key = nullptr;  // null: empty
  };
  std::vector<Entry> entries_;  // empty until the first insertion
  std::size_t mask_;
};

}  // namespace tahua
