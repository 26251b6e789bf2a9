// A command in RESP (an array of bulk strings), appended to a buffer. hiredis formats
// commands too (redisFormatCommandArgv), but through its sds strings: about 9,000
// instructions for a ten-argument XADD, measured with callgrind, against a few hundred
// here. Replies are still parsed by hiredis' reader, and copied out of its tree.
#pragma once

#include <charconv>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct redisReply;

namespace tahua {

// A reply, copied out of hiredis' tree.
struct RedisReply {
  enum class Type { Nil, Integer, String, Status, Error, Array };
  Type type = Type::Nil;
  long long integer = 0;
  std::string str;  // String, Status, Error
  std::vector<RedisReply> elements;
  bool isError() const { return type == Type::Error; }
};
RedisReply copyReply(const redisReply* r);  // redis_connection.cpp

// The pieces of a command: "*<count>", each argument's "$<length>" and its bytes.
inline void appendRespLine(std::string& out, char type, std::size_t n) {
  char num[24];
  num[0] = type;
  char* end = std::to_chars(num + 1, num + sizeof num - 2, n).ptr;
  *end++ = '\r';
  *end++ = '\n';
  out.append(num, static_cast<std::size_t>(end - num));
}
inline void appendRespLength(std::string& out, std::size_t n) { appendRespLine(out, '$', n); }  // then n bytes, "\r\n"
inline void appendRespArg(std::string& out, std::string_view a) {
  appendRespLength(out, a.size());
  out.append(a.data(), a.size());
  out.append("\r\n", 2);
}

inline void appendResp(std::string& out, std::span<const std::string_view> args) {
  appendRespLine(out, '*', args.size());
  for (std::string_view a : args) appendRespArg(out, a);
}

}  // namespace tahua
