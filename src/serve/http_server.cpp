#include "serve/http_server.h"

#include <array>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/error.h"
#include "model/zaya_model.h"
#include "serve/completion_request.h"
#include "serve/completion_response.h"
#include "serve/decode_engine.h"
#include "tokenizer/tokenizer.h"

namespace zaya {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// The label of each request in /metrics: a known endpoint, or "other" for every other path. The set is
// fixed, so that no request can grow the server's memory or write its own text into /metrics.
constexpr std::array<std::string_view, 8> kEndpoints = {"/v1/completions", "/v1/models", "/health",
                                                        "/metrics",        "/tokenize",  "/detokenize",
                                                        "/tokenizer_info", "other"};

size_t endpoint_index(std::string_view path) {
  for (size_t i = 0; i + 1 < kEndpoints.size(); ++i)
    if (kEndpoints[i] == path) return i;
  return kEndpoints.size() - 1;
}

// Latency summaries and request counts for /metrics (the loop's thread writes them, /metrics reads them
// there too; the lock keeps them whole should that change).
struct Metrics {
  std::mutex mutex;
  // Per endpoint, count by status (statuses are the few this server sends).
  std::array<std::map<int, int64_t>, kEndpoints.size()> requests;
  double latency_sum = 0, first_token_sum = 0;
  int64_t latency_count = 0, first_token_count = 0;

  void request(std::string_view path, int status) {
    std::lock_guard lock(mutex);
    ++requests[endpoint_index(path)][status];
  }
  void completion(double latency_s, double first_token_s) {
    std::lock_guard lock(mutex);
    latency_sum += latency_s;
    ++latency_count;
    if (first_token_s >= 0) {
      first_token_sum += first_token_s;
      ++first_token_count;
    }
  }
};

void send_json(ResponseWriter& writer, int status, const json& body) {
  writer.whole(status, "application/json", dump_json(body));
}

}  // namespace

struct HttpServer::State final : HttpApplication {
  State(ZayaModel& model, const Tokenizer& tokenizer, ServeOptions options)
      : tokenizer(tokenizer),
        options(std::move(options)),
        limits{this->options.context, model.params().dims().vocab, this->options.max_queued,
               this->options.context * tokenizer.max_token_bytes()},
        engine(model, {this->options.max_running, this->options.max_queued}),
        loop(*this, this->options.connections) {}

  const Tokenizer& tokenizer;
  const ServeOptions options;
  const RequestLimits limits;
  DecodeEngine engine;
  HttpLoop loop;
  Metrics metrics;
  uint64_t next_id = 1;
  std::mt19937_64 seeds{std::random_device{}()};

  std::unique_ptr<PendingResponse> handle(const HttpRequest& request, ResponseWriter& writer) override;
  void refuse(int status, const std::string& message, ResponseWriter& writer) override;
  void answered(const std::string& path, int status) override { metrics.request(path, status); }

  std::unique_ptr<PendingResponse> route(const HttpRequest& request, ResponseWriter& writer);
  std::unique_ptr<PendingResponse> completions(const HttpRequest& request);
  void tokenize(const HttpRequest& request, ResponseWriter& writer);
  std::string metrics_text();
  json tokenizer_info() const;
  std::vector<std::shared_ptr<Sequence>> sequences_for(const CompletionRequest& request);
};

void HttpServer::State::refuse(int status, const std::string& message, ResponseWriter& writer) {
  const char* type = status == 503 ? "server_busy" : status >= 500 ? "server_error" : "invalid_request_error";
  write_api_error(writer, ApiError(status, type, message));
}

std::unique_ptr<PendingResponse> HttpServer::State::handle(const HttpRequest& request,
                                                           ResponseWriter& writer) {
  try {
    // Authentication before routing: without the key, no path says whether it exists.
    if (!options.api_key.empty() && request.path != "/health") {
      const std::string* authorization = request.header("authorization");
      if (!authorization || *authorization != "Bearer " + options.api_key)
        throw ApiError(401, "authentication_error", "a valid 'Authorization: Bearer <key>' is needed");
    }
    return route(request, writer);
  } catch (const ApiError& e) {
    write_api_error(writer, e);
  } catch (const std::bad_alloc&) {
    write_api_error(writer, ApiError(500, "server_error", "out of memory"));
  }
  return nullptr;
}

std::unique_ptr<PendingResponse> HttpServer::State::route(const HttpRequest& request,
                                                          ResponseWriter& writer) {
  const std::string& path = request.path;
  const bool get = request.method == "GET", post = request.method == "POST";
  auto need = [&](bool right, const char* method) {
    if (!right) throw ApiError(405, "invalid_request_error", cat(path, " takes ", method));
  };
  if (path == "/v1/completions") {
    need(post, "POST");
    return completions(request);
  }
  if (path == "/health") {
    need(get, "GET");
    send_json(writer, 200, {{"status", "ok"}});
  } else if (path == "/metrics") {
    need(get, "GET");
    writer.whole(200, "text/plain; version=0.0.4", metrics_text());
  } else if (path == "/v1/models") {
    need(get, "GET");
    const json model = {{"id", options.model_name},
                        {"object", "model"},
                        {"created", 0},
                        {"owned_by", "zaya"},
                        {"max_model_len", options.context}};
    send_json(writer, 200, {{"object", "list"}, {"data", json::array({model})}});
  } else if (path == "/tokenize") {
    need(post, "POST");
    tokenize(request, writer);
  } else if (path == "/detokenize") {
    need(post, "POST");
    const json body = parse_request_body(request.body);
    const std::vector<int32_t> ids = parse_token_ids(body.value("tokens", json()), limits.vocab, "tokens");
    send_json(writer, 200, {{"prompt", tokenizer.decode(ids)}});
  } else if (path == "/tokenizer_info") {
    need(get, "GET");
    send_json(writer, 200, tokenizer_info());
  } else {
    throw ApiError(404, "invalid_request_error", "no such endpoint");
  }
  return nullptr;
}

void HttpServer::State::tokenize(const HttpRequest& request, ResponseWriter& writer) {
  const json body = parse_request_body(request.body);
  const auto prompt = body.find("prompt");
  if (prompt == body.end() || !prompt->is_string()) throw bad_request("'prompt' must be a string", "prompt");
  const std::string& text = prompt->get_ref<const std::string&>();
  check_prompt_bytes(text, limits);
  std::vector<int32_t> ids;
  try {
    ids = tokenizer.encode(text);
  } catch (const Error& e) {
    throw bad_request(e.message(), "prompt");
  }
  json strings = json::array();
  for (int32_t id : ids) strings.push_back(tokenizer.id_to_token(id).value_or(""));
  send_json(
      writer, 200,
      {{"count", ids.size()}, {"max_model_len", options.context}, {"tokens", ids}, {"token_strs", strings}});
}

std::vector<std::shared_ptr<Sequence>> HttpServer::State::sequences_for(const CompletionRequest& request) {
  const uint64_t seed = request.seed ? *request.seed : seeds();
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options.request_timeout_s));
  std::vector<std::shared_ptr<Sequence>> sequences;
  for (size_t p = 0; p < request.prompts.size(); ++p) {
    for (int64_t c = 0; c < request.n; ++c) {
      SequenceRequest s;
      s.prompt = request.prompts[p];
      s.max_tokens = request.max_tokens;
      s.rule = request.rule;
      // The choices of one request differ; a request with a seed gives the same choices every time.
      s.seed = seed + uint64_t(p) * uint64_t(request.n) + uint64_t(c);
      s.logprobs = request.logprobs;
      s.score_prompt = request.echo && request.logprobs.has_value();
      s.stop_token = tokenizer.eos_id();
      s.deadline = deadline;
      // Each event wakes the loop, which pumps the responses that wait.
      sequences.push_back(std::make_shared<Sequence>(std::move(s), [this] { loop.wake(); }));
    }
  }
  return sequences;
}

std::unique_ptr<PendingResponse> HttpServer::State::completions(const HttpRequest& http_request) {
  const Clock::time_point start = Clock::now();
  auto request = std::make_unique<const CompletionRequest>(
      parse_completion_request(http_request.body, tokenizer, limits));
  std::vector<std::shared_ptr<Sequence>> sequences = sequences_for(*request);
  if (!engine.submit(sequences))
    throw ApiError(503, "server_busy", "the server's queue is full; retry later");
  CompletionInfo info;
  info.id = "cmpl-" + std::to_string(next_id++);
  info.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  info.model = options.model_name;
  info.start = start;
  info.give_up = sequences.front()->request().deadline + std::chrono::seconds(30);
  return std::make_unique<CompletionResponse>(
      tokenizer, std::move(request), std::move(sequences), std::move(info),
      [this](double latency_s, double first_token_s) { metrics.completion(latency_s, first_token_s); });
}

std::string HttpServer::State::metrics_text() {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help) {
    out += cat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  };
  {
    std::lock_guard lock(metrics.mutex);
    metric("zaya_requests_total", "counter",
           "Requests answered, by endpoint (\"other\": any other path) and HTTP status.");
    for (size_t e = 0; e < kEndpoints.size(); ++e)
      for (const auto& [status, count] : metrics.requests[e])
        out += cat("zaya_requests_total{endpoint=\"", kEndpoints[e], "\",status=\"", status, "\"} ", count,
                   "\n");
    metric("zaya_request_latency_seconds", "summary", "Time from a completion request to its last token.");
    out += cat("zaya_request_latency_seconds_sum ", metrics.latency_sum,
               "\nzaya_request_latency_seconds_count ", metrics.latency_count, "\n");
    metric("zaya_time_to_first_token_seconds", "summary",
           "Time from a completion request to its first token.");
    out += cat("zaya_time_to_first_token_seconds_sum ", metrics.first_token_sum,
               "\nzaya_time_to_first_token_seconds_count ", metrics.first_token_count, "\n");
  }
  const EngineCounters& c = engine.counters();
  const ConnectionCounters& n = loop.counters();
  const std::pair<const char*, int64_t> counters[] = {
      {"zaya_prompt_tokens_total", c.prompt_tokens},   {"zaya_generation_tokens_total", c.generated_tokens},
      {"zaya_decode_steps_total", c.decode_steps},     {"zaya_prefills_total", c.prefills},
      {"zaya_request_timeouts_total", c.timeouts},     {"zaya_connections_total", n.accepted},
      {"zaya_connections_refused_total", n.refused},   {"zaya_connection_timeouts_total", n.timed_out},
      {"zaya_client_disconnects_total", n.client_left}};
  for (const auto& [name, value] : counters) {
    metric(name, "counter", "Counter.");
    out += cat(name, " ", value, "\n");
  }
  metric("zaya_open_connections", "gauge", "Client connections open.");
  out += cat("zaya_open_connections ", n.open.load(), "\n");
  metric("zaya_running_sequences", "gauge", "Sequences being decoded together.");
  out += cat("zaya_running_sequences ", c.running.load(), "\n");
  metric("zaya_queued_sequences", "gauge", "Sequences waiting for a place.");
  out += cat("zaya_queued_sequences ", c.queued.load(), "\n");
  return out;
}

json HttpServer::State::tokenizer_info() const {
  auto token = [&](std::optional<int32_t> id) -> json {
    if (!id) return nullptr;
    return tokenizer.id_to_token(*id).value_or("");
  };
  return {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"vocab_size", tokenizer.vocab_size()},
          {"model_max_length", options.context},          {"eos_token", token(tokenizer.eos_id())},
          {"bos_token", token(tokenizer.bos_id())},       {"pad_token", token(tokenizer.pad_id())}};
}

HttpServer::HttpServer(ZayaModel& model, const Tokenizer& tokenizer, ServeOptions options)
    : state_(std::make_unique<State>(model, tokenizer, std::move(options))) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  return state_->loop.bind(state_->options.host, state_->options.port);
}

void HttpServer::run() {
  // Connections on a thread of their own; the engine on this one (see DecodeEngine).
  std::thread http([this] {
    try {
      state_->loop.run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "zaya serve: the connections' loop failed: %s\n", e.what());
    }
    state_->engine.stop();
  });
  state_->engine.run();
  state_->loop.stop();
  http.join();
}

void HttpServer::stop() {
  state_->engine.stop();
  state_->loop.stop();
}

}  // namespace zaya
