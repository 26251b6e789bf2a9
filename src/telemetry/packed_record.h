// A record a worker hands to a thread that formats it (the access log's writer, the
// usage exporter): a fixed head of numbers, flags and string references, followed by
// the bytes of its strings, written into the worker's batch with one reservation and a
// few memcpys. No JSON on the worker, no allocation per record; the formatting thread
// reads the head back with memcpy (records sit unaligned in a batch).
//
// Strings are copied: the config or request they come from may be gone before the
// record is formatted (a reload, the request's end). Literals with static storage (error
// codes, end reasons, API names) are kept as pointers.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "telemetry/json_out.h"

namespace tahua {

// A string of the record: its bytes' offset from the record's start, and length.
struct PackedText {
  std::uint32_t offset = 0, size = 0;
};

// A string with static storage (a literal), passed by pointer.
struct PackedLiteral {
  const char* data = nullptr;
  std::uint32_t size = 0;
  PackedLiteral() = default;
  PackedLiteral(std::string_view s) : data(s.data()), size(static_cast<std::uint32_t>(s.size())) {}
  std::string_view view() const { return {data, size}; }
};

// Lays out one record whose head is `Head` (trivially copyable, its first member
// `std::uint32_t size`): strings get offsets as they are named (text()), then write()
// copies the head and the strings into the batch.
template <class Head, std::size_t kMaxTexts>
class PackedWriter {
  static_assert(std::is_trivially_copyable_v<Head>, "records are copied as bytes");

 public:
  PackedText text(std::string_view s) {
    if (s.empty()) return {};
    PackedText t{offset_, static_cast<std::uint32_t>(s.size())};
    texts_[count_++] = Piece{s.data(), t.size};
    offset_ += t.size;
    return t;
  }
  // Sets head.size; the record is then complete in `out`.
  void write(JsonBuf& out, Head& head) {
    head.size = offset_;
    char* p = out.reserve(offset_);
    std::memcpy(p, &head, sizeof head);
    char* at = p + sizeof head;
    for (std::size_t i = 0; i < count_; ++i) {
      std::memcpy(at, texts_[i].data, texts_[i].size);
      at += texts_[i].size;
    }
    out.advance(at);
  }

 private:
  struct Piece {
    const char* data;
    std::uint32_t size;
  };
  std::uint32_t offset_ = sizeof(Head);
  std::size_t count_ = 0;
  Piece texts_[kMaxTexts];  // the first count_ are set (left uninitialised: nothing to clear per record)
};

// Reads a batch of records back, on the formatting thread.
template <class Head>
class PackedReader {
 public:
  explicit PackedReader(std::string_view batch) : rest_(batch) {}
  // The next record, or false at the end (or at a record that does not fit: a bug).
  bool next() {
    if (rest_.size() < sizeof(Head)) return false;
    std::memcpy(&head_, rest_.data(), sizeof head_);
    if (head_.size > rest_.size() || head_.size < sizeof(Head)) return false;
    record_ = rest_.substr(0, head_.size);
    rest_.remove_prefix(head_.size);
    return true;
  }
  const Head& head() const { return head_; }
  std::string_view record() const { return record_; }
  std::string_view text(PackedText t) const { return record_.substr(t.offset, t.size); }

 private:
  std::string_view rest_, record_;
  Head head_;
};

}  // namespace tahua
