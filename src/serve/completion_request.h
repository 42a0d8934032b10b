#pragma once
// The body of an OpenAI-style POST /v1/completions, read and checked before anything runs: every field of the
// wrong type or out of range is an ApiError (HTTP 400) naming it, in the error object OpenAI's clients read.
// Fields this server does not know are ignored, as OpenAI-compatible servers do.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "infer/generator.h"

namespace zaya {

class Tokenizer;

// An error for the client: the HTTP status, OpenAI's error type, the offending field (or empty).
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, std::string message, std::string param = "")
      : std::runtime_error(std::move(message)),
        status(status),
        type(std::move(type)),
        param(std::move(param)) {}
  int status;
  std::string type, param;
};

// An invalid_request_error (400) about `param`.
ApiError bad_request(std::string message, std::string param = "");

class ResponseWriter;
// The error as OpenAI's error object {"error": {"message", "type", "param", "code"}}, a whole response.
void write_api_error(ResponseWriter& writer, const ApiError& error);
// JSON text for a response: pieces of a UTF-8 character (a token's own text) are replaced, never an error.
std::string dump_json(const nlohmann::json& value);

// A prompt text over limits.max_prompt_bytes: ApiError 400 naming "prompt".
struct RequestLimits;
void check_prompt_bytes(std::string_view text, const RequestLimits& limits);

// A request body as a JSON object (nesting bounded as every JSON zaya reads); ApiError 400 otherwise.
nlohmann::json parse_request_body(std::string_view body);
// The request's `field` as token ids below vocab; ApiError 400 naming the field otherwise.
std::vector<int32_t> parse_token_ids(const nlohmann::json& list, int64_t vocab, const char* field);

struct CompletionRequest {
  std::vector<std::vector<int32_t>> prompts;  // each at least one token
  std::vector<std::string> prompt_texts;      // as given, or the decoded ids
  int64_t max_tokens = 16;                    // OpenAI's default
  SamplingRule rule{1.0, 1.0, 0};             // temperature 1, top_p 1, no top_k: OpenAI's defaults
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;  // up to 64 strings
  int64_t n = 1;
  bool stream = false;
  std::optional<int64_t> logprobs;  // alternatives per token, 0..20
  bool echo = false;
  std::string model;
};

struct RequestLimits {
  int64_t context = 0;       // prompt + max_tokens at most this (the model's max_position_embeddings)
  int64_t vocab = 0;         // token ids below this
  int64_t max_choices = 64;  // prompts x n
  // A prompt text longer than this cannot fit the context (context x the tokenizer's longest token): it is
  // refused before it is tokenized. 0: no bound.
  int64_t max_prompt_bytes = 0;
};

// Throws ApiError.
CompletionRequest parse_completion_request(std::string_view body, const Tokenizer& tokenizer,
                                           const RequestLimits& limits);

}  // namespace zaya
