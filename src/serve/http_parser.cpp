#include "serve/http_parser.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace zaya {

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (key == name) return &value;
  return nullptr;
}

namespace {

HttpParse invalid(int status, std::string message) {
  HttpParse parse;
  parse.state = HttpParse::State::Invalid;
  parse.status = status;
  parse.message = std::move(message);
  return parse;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// RFC 9110's token: the characters of a method and a header name.
bool is_token(std::string_view text) {
  if (text.empty()) return false;
  return std::all_of(text.begin(), text.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

// Whether a comma-separated header value (Connection) lists `option`, ignoring case.
bool lists(std::string_view value, std::string_view option) {
  while (!value.empty()) {
    const size_t comma = value.find(',');
    if (lower(trim(value.substr(0, comma))) == option) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

// "METHOD SP target SP HTTP/1.x"; an empty message when it is one.
std::string read_request_line(std::string_view line, HttpRequest& out, int& status) {
  status = 400;
  const size_t first = line.find(' ');
  const size_t second = first == std::string_view::npos ? first : line.find(' ', first + 1);
  if (second == std::string_view::npos || line.find(' ', second + 1) != std::string_view::npos)
    return "the request line must be 'METHOD /path HTTP/1.1'";
  const std::string_view method = line.substr(0, first);
  const std::string_view target = line.substr(first + 1, second - first - 1);
  const std::string_view version = line.substr(second + 1);
  if (!is_token(method)) return "the request's method is not a token";
  if (target.empty() || target.front() != '/') return "the request target must be a path beginning with '/'";
  for (const char c : target)
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f)
      return "the request target holds a control character";
  if (version.size() != 8 || !version.starts_with("HTTP/") ||
      !std::isdigit(static_cast<unsigned char>(version[5])) || version[6] != '.' ||
      !std::isdigit(static_cast<unsigned char>(version[7])))
    return "the request line must end with the protocol version, HTTP/1.1";
  if (version[5] != '1') {
    status = 505;
    return "only HTTP/1.0 and HTTP/1.1 are served";
  }
  out.method = method;
  out.target = target;
  out.path = target.substr(0, target.find('?'));
  out.minor_version = version[7] - '0';
  return "";
}

}  // namespace

HttpParse parse_http_request(std::string_view bytes, const HttpLimits& limits, HttpRequest& out) {
  // Empty lines before a request are ignored (RFC 9112 2.2); they count against the head's bound.
  size_t start = 0;
  while (bytes.substr(start).starts_with("\r\n")) start += 2;
  const size_t head_end = bytes.find("\r\n\r\n", start);
  const size_t head_bytes = head_end == std::string_view::npos ? bytes.size() : head_end + 4;
  if (head_bytes > limits.max_header_bytes)
    return invalid(431, cat("the request's headers exceed ", limits.max_header_bytes, " bytes"));
  if (head_end == std::string_view::npos) return {};

  out = HttpRequest();
  std::string_view head = bytes.substr(start, head_end - start);
  const size_t line_end = head.find("\r\n");
  int status = 400;
  if (std::string why = read_request_line(head.substr(0, line_end), out, status); !why.empty())
    return invalid(status, why);
  head = line_end == std::string_view::npos ? std::string_view() : head.substr(line_end + 2);
  while (!head.empty()) {
    const size_t end = head.find("\r\n");
    const std::string_view line = head.substr(0, end);
    head = end == std::string_view::npos ? std::string_view() : head.substr(end + 2);
    const size_t colon = line.find(':');
    // A name followed by whitespace, or a line that continues the one before (obsolete folding), is refused
    // as RFC 9112 5.1 and 5.2 ask.
    if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
      return invalid(400, "a header line must be 'Name: value'");
    const std::string_view value = trim(line.substr(colon + 1));
    for (const char c : value)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
        return invalid(400, "a header value holds a control character");
    out.headers.emplace_back(lower(line.substr(0, colon)), std::string(value));
  }

  out.keep_alive = out.minor_version >= 1;
  if (const std::string* connection = out.header("connection")) {
    if (lists(*connection, "close")) out.keep_alive = false;
    if (lists(*connection, "keep-alive")) out.keep_alive = true;
  }
  if (const std::string* expect = out.header("expect")) {
    if (lower(*expect) != "100-continue") return invalid(417, "only 'Expect: 100-continue' is understood");
    out.expect_continue = out.minor_version >= 1;
  }
  if (out.header("transfer-encoding"))
    return invalid(411, "request bodies must be sent with Content-Length, not Transfer-Encoding");

  size_t length = 0;
  bool has_length = false;
  for (const auto& [name, value] : out.headers) {
    if (name != "content-length") continue;
    // Digits only (no sign, no spaces inside); every Content-Length of a request must agree.
    if (value.empty() || value.size() > 19 || !std::all_of(value.begin(), value.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c));
        }))
      return invalid(400, "Content-Length must be a number of bytes");
    const size_t each = std::stoull(value);
    if (has_length && each != length) return invalid(400, "the request has Content-Lengths that differ");
    length = each;
    has_length = true;
  }
  if (length > limits.max_body_bytes)
    return invalid(413,
                   cat("the request body is too large: ", length, " bytes, at most ", limits.max_body_bytes));

  HttpParse parse;
  if (bytes.size() - head_bytes < length) {
    parse.state = HttpParse::State::Body;
    parse.consumed = head_bytes + length;
    return parse;
  }
  out.body.assign(bytes.substr(head_bytes, length));
  parse.state = HttpParse::State::Complete;
  parse.consumed = head_bytes + length;
  return parse;
}

}  // namespace zaya
