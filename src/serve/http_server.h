#pragma once
// zaya serve's HTTP side: OpenAI-compatible completions (whole or streamed as server-sent events), the model
// list, health, Prometheus metrics, and vLLM's tokenizer endpoints, on our own HTTP/1.1 event loop
// (http_loop), in front of one DecodeEngine.

#include <cstdint>
#include <memory>
#include <string>

#include "serve/http_loop.h"

namespace zaya {

class Tokenizer;
class ZayaModel;

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0: any free port
  std::string api_key;  // when set, every request but /health needs "Authorization: Bearer <key>"
  std::string model_name;
  int64_t context = 0;  // the model's max_position_embeddings
  int64_t max_running = 8, max_queued = 64;
  double request_timeout_s = 600;
  ConnectionLimits connections;  // and the head and body sizes
};

class HttpServer {
 public:
  HttpServer(ZayaModel& model, const Tokenizer& tokenizer, ServeOptions options);
  ~HttpServer();

  // Binds the listening socket; returns the port (the chosen one for port 0). Throws Error naming --host or
  // --port when it cannot.
  int bind();
  // Serves until stop() (from another thread or a signal handler's thread). The model runs on the calling
  // thread, which should be the one that loaded it (see DecodeEngine); the connections on one other.
  void run();
  void stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace zaya
