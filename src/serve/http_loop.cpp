#include "serve/http_loop.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_map>

#include "core/error.h"

namespace zaya {

using Clock = std::chrono::steady_clock;

namespace {

constexpr uint64_t kListenId = 0, kWakeId = 1;
constexpr size_t kReadBytes = 64 << 10;  // a read's chunk; a connection is read again on its next event
// Deadlines are checked this often; epoll_wait waits at most this long.
constexpr auto kSweepEvery = std::chrono::milliseconds(200);
constexpr auto kLingerFor = std::chrono::seconds(2);

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

struct HttpLoop::Connection {
  enum class Phase {
    Reading,    // a request's bytes (or none yet)
    Answering,  // a PendingResponse; reading stops, but a peer that closes is seen (EPOLLRDHUP)
    Closing,    // the last response is written out, then the sending side shut
    Lingering,  // what the client still sends is read and dropped until it closes or kLingerFor passes, so
                // that its late bytes do not reset the connection before it has read the last response
  };
  uint64_t id = 0;
  int fd = -1;
  std::string client;  // the peer's address bytes
  Phase phase = Phase::Reading;
  std::string in;   // received, not yet consumed
  std::string out;  // to send from out_sent on
  size_t out_sent = 0;
  HttpRequest request;         // the one being read or answered
  bool started = false;        // a byte of this request arrived (else the connection waits idle)
  bool in_body = false;        // the head is read
  size_t needed = 0;           // in_body: the bytes the request takes
  bool continue_sent = false;  // "100 Continue"
  bool peer_closed = false;
  Clock::time_point deadline;       // Reading: of the current part
  Clock::time_point last_progress;  // of writing
  std::optional<ResponseWriter> writer;
  std::unique_ptr<PendingResponse> pending;
  uint32_t interest = 0;  // registered with epoll
  bool registered = false;

  size_t unsent() const { return out.size() - out_sent; }
};

struct HttpLoop::State {
  State(HttpApplication& application, ConnectionLimits limits, ConnectionCounters& counters)
      : application(application), limits(limits), counters(counters) {}
  ~State();

  HttpApplication& application;
  const ConnectionLimits limits;
  ConnectionCounters& counters;
  int listen_fd = -1, epoll_fd = -1, wake_fd = -1;
  bool listen_paused = false;  // out of file descriptors: accepting resumes when a connection closes
  std::atomic<bool> stopping{false};
  std::atomic<bool> woken{false};  // a wake is signalled and not yet seen: more wakes need no write
  uint64_t next_id = 2;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections;
  std::map<std::string, int64_t> per_client;

  void accept_all();
  void refuse_at_once(int fd, const std::string& why);
  void on_event(Connection& c, uint32_t events);
  void read_some(Connection& c);
  void process(Connection& c);
  void start_answer(Connection& c);
  void pump(Connection& c);
  void finish_answer(Connection& c);
  void refuse(Connection& c, int status, const std::string& message);
  void flush(Connection& c);
  void update_interest(Connection& c);
  void sweep();
  void close(Connection& c);  // deletes c
  void set_listening(bool on);
};

HttpLoop::State::~State() {
  for (auto& [id, c] : connections) {
    if (c->pending) c->pending->abandon();
    ::close(c->fd);
  }
  for (const int fd : {listen_fd, epoll_fd, wake_fd})
    if (fd >= 0) ::close(fd);
}

HttpLoop::HttpLoop(HttpApplication& application, ConnectionLimits limits)
    : state_(std::make_unique<State>(application, limits, counters_)) {
  state_->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  state_->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (state_->epoll_fd < 0 || state_->wake_fd < 0)
    throw Error(cat("cannot create an epoll set: ", strerror(errno)));
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kWakeId;
  epoll_ctl(state_->epoll_fd, EPOLL_CTL_ADD, state_->wake_fd, &event);
}

HttpLoop::~HttpLoop() = default;

int HttpLoop::bind(const std::string& host, int port) {
  sockaddr_storage address{};
  socklen_t length = 0;
  const std::string literal = host == "localhost" ? "127.0.0.1" : host;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&address);
  if (inet_pton(AF_INET, literal.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(uint16_t(port));
    length = sizeof *v4;
  } else if (inet_pton(AF_INET6, literal.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(uint16_t(port));
    length = sizeof *v6;
  } else {
    throw Error(cat("'", host, "' is not an IPv4 or IPv6 address (or localhost)")).field("--host");
  }
  const int fd = socket(address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(cat("cannot open a socket: ", strerror(errno))).field("--host");
  // SO_REUSEADDR only, to rebind while old connections linger in TIME_WAIT; no SO_REUSEPORT, which would
  // let a second server share the port: a port in use must be an error.
  const int yes = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), length) != 0 || listen(fd, 1024) != 0) {
    const int error = errno;
    ::close(fd);
    if (error == EADDRNOTAVAIL)
      throw Error(cat("cannot listen on ", host, ": not an address of this machine")).field("--host");
    throw Error(cat("cannot listen on ", host, ":", port, " (", strerror(error), ")")).field("--port");
  }
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  state_->listen_fd = fd;
  state_->set_listening(true);
  return ntohs(address.ss_family == AF_INET ? v4->sin_port : v6->sin6_port);
}

void HttpLoop::State::set_listening(bool on) {
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.u64 = kListenId;
  if (on) {
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &event);
  } else {
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, &event);
  }
  listen_paused = !on;
}

void HttpLoop::stop() {
  state_->stopping = true;
  wake();
}

void HttpLoop::wake() {
  // An event per token of every sequence: one write until the loop has looked.
  if (state_->woken.exchange(true)) return;
  const uint64_t one = 1;
  // A full counter (2^64 - 2 wakes unread) cannot happen; a failed write leaves the loop awake anyway.
  [[maybe_unused]] const ssize_t written = write(state_->wake_fd, &one, sizeof one);
}

void HttpLoop::run() {
  State& s = *state_;
  epoll_event events[256];
  Clock::time_point last_sweep = Clock::now();
  while (!s.stopping) {
    const int n = epoll_wait(s.epoll_fd, events, 256, int(kSweepEvery.count()));
    if (n < 0 && errno != EINTR) throw Error(cat("epoll_wait: ", strerror(errno)));
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kListenId) {
        s.accept_all();
      } else if (id == kWakeId) {
        s.woken = false;  // before the reads below: an event posted after them wakes the loop again
        uint64_t count = 0;
        [[maybe_unused]] const ssize_t got = read(s.wake_fd, &count, sizeof count);
        std::vector<uint64_t> answering;
        for (const auto& [cid, c] : s.connections)
          if (c->phase == Connection::Phase::Answering) answering.push_back(cid);
        for (const uint64_t cid : answering)
          if (const auto it = s.connections.find(cid); it != s.connections.end()) s.pump(*it->second);
      } else if (const auto it = s.connections.find(id); it != s.connections.end()) {
        s.on_event(*it->second, events[i].events);
      }
    }
    if (Clock::now() - last_sweep >= kSweepEvery) {
      s.sweep();
      last_sweep = Clock::now();
    }
  }
}

void HttpLoop::State::refuse_at_once(int fd, const std::string& why) {
  // One non-blocking write of a 503 and the socket closed: a refused client costs no more than that.
  ++counters.refused;
  std::string bytes;
  ResponseWriter writer(bytes, 1, false);
  application.refuse(503, why, writer);
  [[maybe_unused]] const ssize_t sent = send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::close(fd);
}

void HttpLoop::State::accept_all() {
  for (;;) {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    const int fd =
        accept4(listen_fd, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) set_listening(false);
      return;  // EAGAIN: none left; others (a connection reset before it was accepted) are the client's
    }
    std::string client =
        address.ss_family == AF_INET6
            ? std::string(
                  reinterpret_cast<const char*>(&reinterpret_cast<sockaddr_in6*>(&address)->sin6_addr), 16)
            : std::string(reinterpret_cast<const char*>(&reinterpret_cast<sockaddr_in*>(&address)->sin_addr),
                          4);
    if (int64_t(connections.size()) >= limits.max_connections) {
      refuse_at_once(fd, "the server has too many open connections; retry later");
      continue;
    }
    if (per_client[client] >= limits.max_connections_per_client) {
      refuse_at_once(fd, "too many open connections from this address; retry later");
      continue;
    }
    // A stream writes a small event per token: without TCP_NODELAY, Nagle's algorithm holds each back until
    // the client's delayed acknowledgement of the one before (tens of milliseconds a token).
    const int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    auto c = std::make_unique<Connection>();
    c->id = next_id++;
    c->fd = fd;
    c->client = std::move(client);
    c->deadline = Clock::now() + seconds(limits.header_timeout_s);
    ++per_client[c->client];
    ++counters.accepted;
    ++counters.open;
    Connection& added = *c;
    connections.emplace(c->id, std::move(c));
    update_interest(added);
  }
}

void HttpLoop::State::on_event(Connection& c, uint32_t events) {
  const uint64_t id = c.id;
  if (events & (EPOLLERR | EPOLLHUP)) {
    if (c.pending) ++counters.client_left;
    close(c);
    return;
  }
  if (c.phase == Connection::Phase::Answering && (events & EPOLLRDHUP)) {
    // The client left (or shut its side) before its answer: its sequences stop at the engine's next step.
    ++counters.client_left;
    close(c);
    return;
  }
  if (events & EPOLLOUT) {
    flush(c);
    if (!connections.contains(id)) return;
    if (c.phase == Connection::Phase::Answering) {
      pump(c);
      return;
    }
  }
  if (c.phase == Connection::Phase::Lingering) {
    char dropped[4096];
    const ssize_t got = recv(c.fd, dropped, sizeof dropped, 0);
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) close(c);
    return;
  }
  // EPOLLRDHUP while reading: what the client sent before it is read first; the read that returns 0 ends it.
  if (c.phase == Connection::Phase::Reading && (events & (EPOLLIN | EPOLLRDHUP))) {
    read_some(c);
    if (!connections.contains(id)) return;
  }
  if (c.phase == Connection::Phase::Reading) process(c);
}

void HttpLoop::State::read_some(Connection& c) {
  char buffer[kReadBytes];
  const ssize_t got = recv(c.fd, buffer, sizeof buffer, 0);
  if (got > 0) {
    c.in.append(buffer, size_t(got));
  } else if (got == 0) {
    c.peer_closed = true;
  } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    close(c);
  }
}

void HttpLoop::State::process(Connection& c) {
  const uint64_t id = c.id;
  // Requests in order while the client takes their answers; the next waits in `in`.
  while (c.phase == Connection::Phase::Reading && c.unsent() < PendingResponse::kPumpBytes) {
    if (c.in_body && c.in.size() < c.needed) break;
    const HttpParse parse = parse_http_request(c.in, limits.http, c.request);
    if (parse.state == HttpParse::State::Head) {
      if (!c.in.empty() && !c.started) {
        c.started = true;
        c.deadline = Clock::now() + seconds(limits.header_timeout_s);
      }
      break;
    }
    if (parse.state == HttpParse::State::Invalid) {
      refuse(c, parse.status, parse.message);
      break;
    }
    if (parse.state == HttpParse::State::Body) {
      if (!c.in_body) {
        c.started = c.in_body = true;
        c.needed = parse.consumed;
        c.deadline = Clock::now() + seconds(limits.body_timeout_s);
      }
      if (c.request.expect_continue && !c.continue_sent) {
        c.out += "HTTP/1.1 100 Continue\r\n\r\n";
        c.continue_sent = true;
      }
      break;
    }
    c.in.erase(0, parse.consumed);
    start_answer(c);
    if (!connections.contains(id)) return;
  }
  if (c.peer_closed && c.phase == Connection::Phase::Answering) {
    ++counters.client_left;  // it sent its request and left
    close(c);
    return;
  }
  if (c.peer_closed && c.phase == Connection::Phase::Reading) {
    // No more requests can come: what is answered is sent, then the connection ends.
    c.phase = Connection::Phase::Closing;
  }
  flush(c);
}

void HttpLoop::State::start_answer(Connection& c) {
  const size_t before = c.out.size();
  c.writer.emplace(c.out, c.request.minor_version, c.request.keep_alive);
  try {
    c.pending = application.handle(c.request, *c.writer);
  } catch (const std::exception& e) {
    c.out.resize(before);
    c.writer.emplace(c.out, c.request.minor_version, c.request.keep_alive);
    application.refuse(500, e.what(), *c.writer);
  }
  if (c.pending) {
    c.phase = Connection::Phase::Answering;
    pump(c);
  } else {
    finish_answer(c);
  }
}

void HttpLoop::State::pump(Connection& c) {
  if (c.unsent() >= PendingResponse::kPumpBytes) return;  // the client has not taken the last ones yet
  bool done = false;
  try {
    done = c.pending->pump(*c.writer);
  } catch (const std::exception& e) {
    c.pending->abandon();
    if (c.writer->status() != 0) {  // a stream already begun cannot become an error: it ends here
      c.pending.reset();
      close(c);
      return;
    }
    application.refuse(500, e.what(), *c.writer);
    done = true;
  }
  if (done) {
    c.pending.reset();
    finish_answer(c);
    if (connections.contains(c.id) && c.phase == Connection::Phase::Reading) process(c);
    return;
  }
  flush(c);
}

void HttpLoop::State::finish_answer(Connection& c) {
  application.answered(c.request.path, c.writer->status());
  const bool keep = c.writer->keep_alive();
  c.writer.reset();
  c.request = HttpRequest();
  c.started = !c.in.empty();
  c.in_body = false;
  c.continue_sent = false;
  c.deadline = Clock::now() + seconds(c.started ? limits.header_timeout_s : limits.idle_timeout_s);
  c.phase = keep ? Connection::Phase::Reading : Connection::Phase::Closing;
}

void HttpLoop::State::refuse(Connection& c, int status, const std::string& message) {
  // The bytes after a refused request cannot be framed: the connection ends after the answer.
  c.request.keep_alive = false;
  c.writer.emplace(c.out, c.request.minor_version, false);
  application.refuse(status, message, *c.writer);
  finish_answer(c);
}

void HttpLoop::State::flush(Connection& c) {
  while (c.unsent() > 0) {
    const ssize_t sent = send(c.fd, c.out.data() + c.out_sent, c.unsent(), MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EINTR) continue;
      if (c.pending) ++counters.client_left;
      close(c);
      return;
    }
    c.out_sent += size_t(sent);
    c.last_progress = Clock::now();
  }
  if (c.out_sent == c.out.size()) {
    c.out.clear();
    c.out_sent = 0;
  } else if (c.out_sent > (1 << 20)) {
    c.out.erase(0, c.out_sent);
    c.out_sent = 0;
  }
  if (c.phase == Connection::Phase::Closing && c.unsent() == 0) {
    if (c.peer_closed || shutdown(c.fd, SHUT_WR) != 0) {
      close(c);
      return;
    }
    c.phase = Connection::Phase::Lingering;
    c.deadline = Clock::now() + kLingerFor;
  }
  update_interest(c);
}

void HttpLoop::State::update_interest(Connection& c) {
  // Level-triggered. EPOLLHUP and EPOLLERR come whatever the interest.
  uint32_t interest = c.peer_closed ? 0u : uint32_t(EPOLLRDHUP);
  if ((c.phase == Connection::Phase::Reading && c.unsent() < PendingResponse::kPumpBytes) ||
      c.phase == Connection::Phase::Lingering)
    interest |= EPOLLIN;
  if (c.unsent() > 0) interest |= EPOLLOUT;
  if (c.registered && interest == c.interest) return;
  epoll_event event{};
  event.events = interest;
  event.data.u64 = c.id;
  epoll_ctl(epoll_fd, c.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c.fd, &event);
  c.registered = true;
  c.interest = interest;
}

void HttpLoop::State::sweep() {
  const Clock::time_point now = Clock::now();
  std::vector<uint64_t> ids;
  for (const auto& [id, c] : connections) ids.push_back(id);
  for (const uint64_t id : ids) {
    const auto it = connections.find(id);
    if (it == connections.end()) continue;
    Connection& c = *it->second;
    if (c.unsent() > 0 && now - c.last_progress > seconds(limits.idle_timeout_s)) {
      // The client stopped reading: its answer is dropped.
      ++counters.timed_out;
      if (c.pending) ++counters.client_left;
      close(c);
    } else if (c.phase == Connection::Phase::Lingering && now >= c.deadline) {
      close(c);
    } else if (c.phase == Connection::Phase::Answering) {
      pump(c);  // its own deadline (the request's timeout) is checked there
    } else if (c.phase == Connection::Phase::Reading && now >= c.deadline) {
      ++counters.timed_out;
      if (!c.started) {
        close(c);  // idle between requests, or never sent a byte
      } else {
        refuse(c, 408,
               c.in_body ? "the request body did not arrive in time"
                         : "the request's head did not arrive in time");
        flush(c);
      }
    }
  }
  if (listen_paused && int64_t(connections.size()) < limits.max_connections) set_listening(true);
}

void HttpLoop::State::close(Connection& c) {
  if (c.pending) {
    c.pending->abandon();
    if (c.writer) application.answered(c.request.path, c.writer->status());
  }
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
  ::close(c.fd);
  if (--per_client[c.client] <= 0) per_client.erase(c.client);
  --counters.open;
  const uint64_t id = c.id;
  connections.erase(id);  // c is gone
  if (listen_paused) set_listening(true);
}

}  // namespace zaya
