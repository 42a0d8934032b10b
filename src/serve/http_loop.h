#pragma once
// zaya serve's connections: one thread, one epoll set, non-blocking sockets, so that a connection costs a
// buffer and not a thread. Every connection is bounded before the server spends on it: a deadline for a
// request's head and one for its body (however the bytes trickle in), an idle deadline between requests
// and for a client that stops reading its answer, a cap on open connections in all and per client address,
// and the head and body sizes of HttpLimits. One request per connection is answered at a time, in order
// (pipelined requests wait in the connection's buffer). A response that waits for the decode engine is a
// PendingResponse, pumped when wake() says that work may have progressed and when its client has read
// what it was sent (backpressure).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "serve/http_parser.h"
#include "serve/http_response.h"

namespace zaya {

struct ConnectionLimits {
  int64_t max_connections = 1024;
  int64_t max_connections_per_client = 256;  // per client IP address
  double header_timeout_s = 10;              // from a request's first byte (or the connection's start)
  double body_timeout_s = 30;                // from the end of the head to the last byte of the body
  double idle_timeout_s = 60;                // between requests; and a response the client stops reading
  HttpLimits http;
};

// A response that waits on work done elsewhere.
class PendingResponse {
 public:
  virtual ~PendingResponse() = default;
  // Writes what is ready; true once the response is complete. Returns early once writer.buffered() passes
  // kPumpBytes: it is pumped again when the client has taken them.
  virtual bool pump(ResponseWriter& writer) = 0;
  // The client left, or the server stops: its work is dropped.
  virtual void abandon() = 0;

  static constexpr size_t kPumpBytes = 64 << 10;
};

// What the loop serves.
class HttpApplication {
 public:
  virtual ~HttpApplication() = default;
  // Answers a request: writes a whole response and returns nullptr, or returns a response to pump.
  virtual std::unique_ptr<PendingResponse> handle(const HttpRequest& request, ResponseWriter& writer) = 0;
  // A request refused before handle() (malformed, too large, too slow, too many connections).
  virtual void refuse(int status, const std::string& message, ResponseWriter& writer) = 0;
  // Each response's status when it is complete or abandoned (path empty: refused before its head was read).
  virtual void answered(const std::string& path, int status) = 0;
};

// For /metrics; written by the loop's thread, read anywhere.
struct ConnectionCounters {
  std::atomic<int64_t> open{0}, accepted{0}, refused{0}, timed_out{0}, client_left{0};
};

class HttpLoop {
 public:
  HttpLoop(HttpApplication& application, ConnectionLimits limits);
  ~HttpLoop();

  // host: an IPv4 or IPv6 address, or "localhost"; port 0 picks a free one. Returns the port. Throws Error
  // naming --host or --port.
  int bind(const std::string& host, int port);
  // Serves until stop().
  void run();
  // From any thread.
  void stop();
  // From any thread: pending responses may have something to write.
  void wake();

  const ConnectionCounters& counters() const { return counters_; }

 private:
  struct Connection;
  struct State;
  std::unique_ptr<State> state_;
  ConnectionCounters counters_;
};

}  // namespace zaya
