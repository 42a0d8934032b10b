#pragma once
// The answer to one POST /v1/completions while the engine decodes it: built from its sequences' events as
// they arrive (the event loop pumps it when woken), written whole once every choice has ended, or streamed
// as server-sent events (one per piece of each choice in turn, then "data: [DONE]"). Abandoned (the client
// left), it cancels every sequence of the request, streamed or not.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "serve/completion_choice.h"
#include "serve/completion_request.h"
#include "serve/decode_engine.h"
#include "serve/http_loop.h"

namespace zaya {

class Tokenizer;

struct CompletionInfo {
  std::string id;     // "cmpl-N"
  int64_t created;    // Unix seconds
  std::string model;  // the served name
  std::chrono::steady_clock::time_point start;
  // The engine ends every sequence by its deadline; past this the response gives up on an engine that
  // stalls (504).
  std::chrono::steady_clock::time_point give_up;
};

class CompletionResponse final : public PendingResponse {
 public:
  // Called once when the response is complete: seconds to the last token and to the first (-1: none).
  using Finished = std::function<void(double latency_s, double first_token_s)>;

  CompletionResponse(const Tokenizer& tokenizer, std::unique_ptr<const CompletionRequest> request,
                     std::vector<std::shared_ptr<Sequence>> sequences, CompletionInfo info,
                     Finished finished);
  ~CompletionResponse() override;

  bool pump(ResponseWriter& writer) override;
  void abandon() override;

 private:
  bool pump_whole(ResponseWriter& writer);
  bool pump_stream(ResponseWriter& writer);
  // The current choice's waiting events; true when it has ended (its sequence is then cancelled).
  bool take_events(ResponseWriter* stream);
  std::string chunk(const nlohmann::json& choice) const;
  nlohmann::json usage(int64_t completion_tokens) const;
  double seconds_since_start() const;

  std::unique_ptr<const CompletionRequest> request_;  // the choices refer to it
  std::vector<std::shared_ptr<Sequence>> sequences_;
  std::vector<CompletionChoice> choices_;
  CompletionInfo info_;
  Finished finished_;
  size_t current_ = 0;  // the choice being read
  double first_token_s_ = -1;
  bool begun_ = false;  // a stream's head is written
};

}  // namespace zaya
