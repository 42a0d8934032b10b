#pragma once
// HTTP/1.1 requests read from a connection's bytes, bounded before anything is kept: the head (request line
// and headers) in at most max_header_bytes, a body of Content-Length bytes up to max_body_bytes. Pure: the
// caller owns the bytes and the socket; a request that is not complete yet says what it waits for, so that
// the caller can apply a deadline to each part. Pipelined requests are read one at a time: `consumed` is
// where the next begins.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zaya {

struct HttpLimits {
  size_t max_header_bytes = 16 << 10;  // request line and headers, with their line ends
  size_t max_body_bytes = size_t(32) << 20;
};

struct HttpRequest {
  std::string method;                                        // as sent: GET, POST, ...
  std::string target;                                        // as sent, e.g. /v1/completions?x=1
  std::string path;                                          // the target without its query
  int minor_version = 1;                                     // HTTP/1.0 or HTTP/1.1
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::string body;
  bool keep_alive = true;        // HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with "keep-alive"
  bool expect_continue = false;  // "Expect: 100-continue"

  // The first header of that (lower-case) name, or nullptr.
  const std::string* header(std::string_view name) const;
};

struct HttpParse {
  enum class State {
    Head,      // the head is not complete yet
    Body,      // the head is read (the request's fields are set); the request will take `consumed` bytes
    Complete,  // the request is whole; it took `consumed` bytes
    Invalid,   // answer `status` with `message`, then close: the bytes cannot be framed (or are refused)
  } state = State::Head;
  size_t consumed = 0;
  int status = 0;
  std::string message;
};

// Reads the request that `bytes` begins with into `out` (its head fields from state Body on, its body at
// Complete). Called again with more bytes it reads the head again: a head is at most max_header_bytes.
// Bodies sent with Transfer-Encoding are refused (411: send Content-Length).
HttpParse parse_http_request(std::string_view bytes, const HttpLimits& limits, HttpRequest& out);

}  // namespace zaya
