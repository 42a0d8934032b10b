#include "serve/http_response.h"

#include <cstdio>

#include "core/error.h"

namespace zaya {

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 417:
      return "Expectation Failed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

void ResponseWriter::head(int status, std::string_view content_type, std::string_view framing) {
  status_ = status;
  out_ += cat("HTTP/1.", minor_version_, " ", status, " ", reason_phrase(status),
              "\r\nContent-Type: ", content_type, "\r\n", framing,
              "Connection: ", keep_alive_ ? "keep-alive" : "close", "\r\n\r\n");
}

void ResponseWriter::whole(int status, std::string_view content_type, std::string_view body) {
  head(status, content_type, cat("Content-Length: ", body.size(), "\r\n"));
  out_ += body;
}

void ResponseWriter::begin_stream(int status, std::string_view content_type) {
  if (minor_version_ == 0) {
    keep_alive_ = false;  // the end of the body is the end of the connection
    head(status, content_type, "Cache-Control: no-cache\r\n");
  } else {
    head(status, content_type, "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n");
  }
}

void ResponseWriter::chunk(std::string_view data) {
  if (data.empty()) return;  // an empty chunk would end the stream
  if (minor_version_ == 0) {
    out_ += data;
    return;
  }
  char size[24];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  out_.append(size, size_t(n));
  out_ += data;
  out_ += "\r\n";
}

void ResponseWriter::end_stream() {
  if (minor_version_ != 0) out_ += "0\r\n\r\n";
}

}  // namespace zaya
