#pragma once
// HTTP/1.1 responses written into a connection's output: whole (Content-Length) or streamed (chunked
// transfer encoding; to an HTTP/1.0 client, the bytes as they are and the connection closed at the end).

#include <cstddef>
#include <string>
#include <string_view>

namespace zaya {

class ResponseWriter {
 public:
  // Appends to `out`. keep_alive: whether the connection stays open after this response (the request's
  // wish, unless the server closes it).
  ResponseWriter(std::string& out, int minor_version, bool keep_alive)
      : out_(out), minor_version_(minor_version), keep_alive_(keep_alive) {}

  void whole(int status, std::string_view content_type, std::string_view body);
  void begin_stream(int status, std::string_view content_type);
  void chunk(std::string_view data);
  void end_stream();

  int status() const { return status_; }  // 0 until the head is written
  bool keep_alive() const { return keep_alive_; }
  size_t buffered() const { return out_.size(); }

 private:
  void head(int status, std::string_view content_type, std::string_view framing);

  std::string& out_;
  int minor_version_;
  bool keep_alive_;
  int status_ = 0;
};

// The reason phrase of a status this server sends ("Not Found").
std::string_view reason_phrase(int status);

}  // namespace zaya
