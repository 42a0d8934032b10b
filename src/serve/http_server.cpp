#include "serve/http_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/error.h"
#include "data/tokenizer.h"
#include "model/zaya_model.h"
#include "serve/completion_choice.h"
#include "serve/completion_request.h"
#include "serve/decode_engine.h"

namespace zaya {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// Responses may hold pieces of a UTF-8 character (a token's own text); they are replaced, never an error.
std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_json(httplib::Response& response, int status, const json& body) {
  response.status = status;
  response.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& response, const ApiError& error) {
  send_json(response, error.status,
            {{"error",
              {{"message", error.what()},
               {"type", error.type},
               {"param", error.param.empty() ? json(nullptr) : json(error.param)},
               {"code", nullptr}}}});
}

// Latency summaries and request counts for /metrics.
struct Metrics {
  std::mutex mutex;
  std::map<std::pair<std::string, int>, int64_t> requests;  // (endpoint, status) -> count
  double latency_sum = 0, first_token_sum = 0;
  int64_t latency_count = 0, first_token_count = 0;

  void request(const std::string& path, int status) {
    std::lock_guard lock(mutex);
    ++requests[{path, status}];
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

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

struct HttpServer::State {
  State(ZayaModel& model, const Tokenizer& tokenizer, ServeOptions options)
      : tokenizer(tokenizer),
        options(std::move(options)),
        limits{this->options.context, model.params().dims().vocab, this->options.max_queued},
        engine(model, {this->options.max_running, this->options.max_queued}) {}

  const Tokenizer& tokenizer;
  const ServeOptions options;
  const RequestLimits limits;
  DecodeEngine engine;
  httplib::Server http;
  Metrics metrics;
  std::atomic<uint64_t> next_id{1};
  std::mt19937_64 seeds{std::random_device{}()};
  std::mutex seeds_mutex;

  void routes();
  std::string metrics_text();
  json tokenizer_info() const;
  void completions(const httplib::Request& request, httplib::Response& response);
  json usage(const CompletionRequest& request, int64_t completion_tokens) const;
  std::vector<std::shared_ptr<Sequence>> sequences_for(const CompletionRequest& request);
};

std::vector<std::shared_ptr<Sequence>> HttpServer::State::sequences_for(const CompletionRequest& request) {
  uint64_t seed = 0;
  if (request.seed) {
    seed = *request.seed;
  } else {
    std::lock_guard lock(seeds_mutex);
    seed = seeds();
  }
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
      sequences.push_back(std::make_shared<Sequence>(std::move(s)));
    }
  }
  return sequences;
}

json HttpServer::State::usage(const CompletionRequest& request, int64_t completion_tokens) const {
  int64_t prompt_tokens = 0;
  for (const std::vector<int32_t>& prompt : request.prompts) prompt_tokens += int64_t(prompt.size());
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

void HttpServer::State::completions(const httplib::Request& http_request, httplib::Response& response) {
  const Clock::time_point start = Clock::now();
  auto request = std::make_shared<const CompletionRequest>(
      parse_completion_request(http_request.body, tokenizer, limits));
  auto sequences = std::make_shared<std::vector<std::shared_ptr<Sequence>>>(sequences_for(*request));
  if (!engine.submit(*sequences))
    throw ApiError(503, "server_busy", "the server's queue is full; retry later");
  const std::string id = "cmpl-" + std::to_string(next_id++);
  const int64_t created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  // The engine ends every sequence by its deadline; this margin only guards against an engine that stalls.
  const Clock::time_point give_up = sequences->front()->request().deadline + std::chrono::seconds(30);
  auto choices = std::make_shared<std::vector<CompletionChoice>>();
  for (size_t i = 0; i < sequences->size(); ++i)
    choices->emplace_back(tokenizer, *request, i / size_t(request->n), int64_t(i));
  auto cancel_all = [sequences] {
    for (const std::shared_ptr<Sequence>& sequence : *sequences) sequence->cancel();
  };

  if (!request->stream) {
    double first_token = -1;
    for (size_t i = 0; i < sequences->size(); ++i) {
      while (true) {
        const std::optional<SequenceEvent> event = (*sequences)[i]->next_event(give_up);
        if (!event) {
          cancel_all();
          throw ApiError(504, "timeout", "the model did not answer in time");
        }
        if (first_token < 0 && event->kind == SequenceEvent::Kind::Token) first_token = seconds_since(start);
        if (!(*choices)[i].apply(*event)) break;
      }
      (*sequences)[i]->cancel();  // ended here (a stop string): the engine drops it
      if ((*choices)[i].failed()) {
        cancel_all();
        throw ApiError(500, "server_error", (*choices)[i].error());
      }
    }
    json body = {
        {"id", id}, {"object", "text_completion"}, {"created", created}, {"model", options.model_name}};
    body["choices"] = json::array();
    int64_t completion_tokens = 0;
    for (const CompletionChoice& choice : *choices) {
      body["choices"].push_back(choice.whole());
      completion_tokens += choice.completion_tokens();
    }
    body["usage"] = usage(*request, completion_tokens);
    send_json(response, 200, body);
    metrics.completion(seconds_since(start), first_token);
    return;
  }

  // Streaming: one event per token of each choice in turn (the engine decodes them together; their events
  // wait in their mailboxes), then "data: [DONE]". A write that fails means the client left: every
  // sequence of the request is cancelled at once.
  auto current = std::make_shared<size_t>(0);
  auto first_token = std::make_shared<double>(-1);
  auto chunk = [=, this](const json& choice) {
    return "data: " +
           dump({{"id", id},
                 {"object", "text_completion"},
                 {"created", created},
                 {"model", options.model_name},
                 {"choices", json::array({choice})}}) +
           "\n\n";
  };
  response.status = 200;
  // The provider runs after this function returns: it holds the request too, which the choices refer to.
  response.set_chunked_content_provider(
      "text/event-stream",
      [this, request, sequences, choices, current, first_token, chunk, cancel_all, give_up, start](
          size_t, httplib::DataSink& sink) {
        if (*current == sequences->size()) {
          const std::string done = "data: [DONE]\n\n";
          if (sink.write(done.data(), done.size())) sink.done();
          metrics.completion(seconds_since(start), *first_token);
          return true;
        }
        const size_t i = *current;
        CompletionChoice& choice = (*choices)[i];
        const std::optional<SequenceEvent> event = (*sequences)[i]->next_event(give_up);
        if (!event) {
          cancel_all();
          return false;
        }
        if (*first_token < 0 && event->kind == SequenceEvent::Kind::Token)
          *first_token = seconds_since(start);
        const bool more = choice.apply(*event);
        std::string out;
        if (!more && choice.failed()) {
          out =
              "data: " + dump({{"error", {{"message", choice.error()}, {"type", "server_error"}}}}) + "\n\n";
        } else if (const json delta = choice.next_delta(); !delta.is_null()) {
          out = chunk(delta);
        }
        if (!more) {
          (*sequences)[i]->cancel();
          ++*current;
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          cancel_all();
          return false;
        }
        return true;
      },
      [cancel_all](bool) { cancel_all(); });
}

std::string HttpServer::State::metrics_text() {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help) {
    out += cat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  };
  {
    std::lock_guard lock(metrics.mutex);
    metric("zaya_requests_total", "counter", "Requests answered, by endpoint and HTTP status.");
    for (const auto& [key, count] : metrics.requests)
      out +=
          cat("zaya_requests_total{endpoint=\"", key.first, "\",status=\"", key.second, "\"} ", count, "\n");
    metric("zaya_request_latency_seconds", "summary", "Time from a completion request to its last token.");
    out += cat("zaya_request_latency_seconds_sum ", metrics.latency_sum,
               "\nzaya_request_latency_seconds_count ", metrics.latency_count, "\n");
    metric("zaya_time_to_first_token_seconds", "summary",
           "Time from a completion request to its first token.");
    out += cat("zaya_time_to_first_token_seconds_sum ", metrics.first_token_sum,
               "\nzaya_time_to_first_token_seconds_count ", metrics.first_token_count, "\n");
  }
  const EngineCounters& c = engine.counters();
  const std::pair<const char*, int64_t> counters[] = {{"zaya_prompt_tokens_total", c.prompt_tokens},
                                                      {"zaya_generation_tokens_total", c.generated_tokens},
                                                      {"zaya_decode_steps_total", c.decode_steps},
                                                      {"zaya_prefills_total", c.prefills},
                                                      {"zaya_request_timeouts_total", c.timeouts}};
  for (const auto& [name, value] : counters) {
    metric(name, "counter", "Engine counter.");
    out += cat(name, " ", value, "\n");
  }
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

void HttpServer::State::routes() {
  http.set_payload_max_length(size_t(options.max_body_bytes));
  // A stream writes a small event per token: without TCP_NODELAY, Nagle's algorithm holds each back until
  // the client's delayed acknowledgement of the one before (tens of milliseconds a token).
  http.set_tcp_nodelay(true);
  // httplib's default adds SO_REUSEPORT, which lets a second server take the same port and share its
  // connections; a port in use must be an error instead.
  http.set_socket_options([](int socket) {
    const int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http.new_task_queue = [this] {
    // A thread per open stream and request, and some for /health and /metrics while all are busy.
    return new httplib::ThreadPool(size_t(options.max_running + options.max_queued + 4));
  };
  http.set_pre_routing_handler([this](const httplib::Request& request, httplib::Response& response) {
    if (options.api_key.empty() || request.path == "/health")
      return httplib::Server::HandlerResponse::Unhandled;
    if (request.get_header_value("Authorization") == "Bearer " + options.api_key)
      return httplib::Server::HandlerResponse::Unhandled;
    send_error(response,
               ApiError(401, "authentication_error", "a valid 'Authorization: Bearer <key>' is needed"));
    metrics.request(request.path, 401);
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_exception_handler(
      [this](const httplib::Request& request, httplib::Response& response, std::exception_ptr thrown) {
        try {
          std::rethrow_exception(thrown);
        } catch (const ApiError& e) {
          send_error(response, e);
        } catch (const std::exception& e) {
          send_error(response, ApiError(500, "server_error", e.what()));
        }
        metrics.request(request.path, response.status);
      });
  http.set_error_handler([](const httplib::Request&, httplib::Response& response) {
    if (!response.body.empty()) return;
    const std::string message = response.status == 404   ? "no such endpoint"
                                : response.status == 413 ? "the request body is too large"
                                                         : "the request could not be handled";
    send_error(response, ApiError(response.status, "invalid_request_error", message));
  });

  auto counted = [this](auto handler) {
    return [this, handler](const httplib::Request& request, httplib::Response& response) {
      handler(request, response);
      metrics.request(request.path, response.status);
    };
  };
  http.Post("/v1/completions", counted([this](const httplib::Request& request, httplib::Response& response) {
              completions(request, response);
            }));
  http.Get("/v1/models", counted([this](const httplib::Request&, httplib::Response& response) {
             const json model = {{"id", options.model_name},
                                 {"object", "model"},
                                 {"created", 0},
                                 {"owned_by", "zaya"},
                                 {"max_model_len", options.context}};
             send_json(response, 200, {{"object", "list"}, {"data", json::array({model})}});
           }));
  http.Get("/health", [](const httplib::Request&, httplib::Response& response) {
    send_json(response, 200, {{"status", "ok"}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(metrics_text(), "text/plain; version=0.0.4");
  });
  http.Post("/tokenize", counted([this](const httplib::Request& request, httplib::Response& response) {
              const json body = parse_request_body(request.body);
              const auto prompt = body.find("prompt");
              if (prompt == body.end() || !prompt->is_string())
                throw bad_request("'prompt' must be a string", "prompt");
              std::vector<int32_t> ids;
              try {
                ids = tokenizer.encode(prompt->get<std::string>());
              } catch (const Error& e) {
                throw bad_request(e.message(), "prompt");
              }
              json strings = json::array();
              for (int32_t id : ids) strings.push_back(tokenizer.id_to_token(id).value_or(""));
              send_json(response, 200,
                        {{"count", ids.size()},
                         {"max_model_len", options.context},
                         {"tokens", ids},
                         {"token_strs", strings}});
            }));
  http.Post("/detokenize", counted([this](const httplib::Request& request, httplib::Response& response) {
              const json body = parse_request_body(request.body);
              const std::vector<int32_t> ids =
                  parse_token_ids(body.value("tokens", json()), limits.vocab, "tokens");
              send_json(response, 200, {{"prompt", tokenizer.decode(ids)}});
            }));
  http.Get("/tokenizer_info", counted([this](const httplib::Request&, httplib::Response& response) {
             send_json(response, 200, tokenizer_info());
           }));
}

HttpServer::HttpServer(ZayaModel& model, const Tokenizer& tokenizer, ServeOptions options)
    : state_(std::make_unique<State>(model, tokenizer, std::move(options))) {
  state_->routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const ServeOptions& o = state_->options;
  const int port = o.port == 0 ? state_->http.bind_to_any_port(o.host) : o.port;
  if (o.port != 0 && !state_->http.bind_to_port(o.host, o.port)) {
    throw Error(cat("cannot listen on ", o.host, ":", o.port, " (in use, or not an address of this machine)"))
        .field("--port");
  }
  if (port < 0) throw Error(cat("cannot listen on ", o.host)).field("--host");
  return port;
}

void HttpServer::run() {
  // HTTP on a thread of its own; the engine on this one (see DecodeEngine).
  std::thread http([this] {
    state_->http.listen_after_bind();
    state_->engine.stop();
  });
  state_->engine.run();
  state_->http.stop();
  http.join();
}

void HttpServer::stop() {
  state_->engine.stop();
  state_->http.stop();
}

}  // namespace zaya
