#include "serve/completion_request.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_input.h"
#include "serve/http_response.h"
#include "tokenizer/tokenizer.h"

namespace zaya {

ApiError bad_request(std::string message, std::string param) {
  return ApiError(400, "invalid_request_error", std::move(message), std::move(param));
}

void write_api_error(ResponseWriter& writer, const ApiError& error) {
  const nlohmann::json body = {
      {"error",
       {{"message", error.what()},
        {"type", error.type},
        {"param", error.param.empty() ? nlohmann::json(nullptr) : nlohmann::json(error.param)},
        {"code", nullptr}}}};
  writer.whole(error.status, "application/json", dump_json(body));
}

std::string dump_json(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void check_prompt_bytes(std::string_view text, const RequestLimits& limits) {
  if (limits.max_prompt_bytes > 0 && int64_t(text.size()) > limits.max_prompt_bytes) {
    throw bad_request(cat("the prompt's ", text.size(), " bytes cannot fit this model's context of ",
                          limits.context, " tokens (at most ", limits.max_prompt_bytes, " bytes of text)"),
                      "prompt");
  }
}

std::vector<int32_t> parse_token_ids(const nlohmann::json& list, int64_t vocab, const char* field) {
  if (!list.is_array()) throw bad_request(cat("'", field, "' must be a list of token ids"), field);
  std::vector<int32_t> ids;
  for (const nlohmann::json& id : list) {
    // Integers beyond int64 parse as unsigned; their int64 value would wrap.
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab ||
        (id.is_number_unsigned() && id.get<uint64_t>() >= uint64_t(vocab)))
      throw bad_request(cat("'", field, "' holds ", id.dump(), ", not a token id below ", vocab), field);
    ids.push_back(int32_t(id.get<int64_t>()));
  }
  return ids;
}

nlohmann::json parse_request_body(std::string_view body) {
  nlohmann::json doc;
  try {
    doc = parse_json(body, "the request body");
  } catch (const Error& e) {
    throw bad_request(e.message());
  }
  if (!doc.is_object()) throw bad_request("the request body must be a JSON object");
  return doc;
}

namespace {

using json = nlohmann::json;

int64_t integer(const json& value, const char* field, int64_t low, int64_t high) {
  if (!value.is_number_integer()) throw bad_request(cat("'", field, "' must be an integer"), field);
  // Integers beyond int64 parse as unsigned.
  if (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(high))
    throw bad_request(cat("'", field, "' must be at most ", high), field);
  const int64_t v = value.get<int64_t>();
  if (v < low || v > high)
    throw bad_request(cat("'", field, "' must be in [", low, ", ", high, "], got ", v), field);
  return v;
}

double number(const json& value, const char* field, double low, double high) {
  if (!value.is_number()) throw bad_request(cat("'", field, "' must be a number"), field);
  const double v = value.get<double>();
  if (!std::isfinite(v) || v < low || v > high)
    throw bad_request(cat("'", field, "' must be in [", low, ", ", high, "], got ", value.dump()), field);
  return v;
}

bool boolean(const json& value, const char* field) {
  if (!value.is_boolean()) throw bad_request(cat("'", field, "' must be true or false"), field);
  return value.get<bool>();
}

// prompt: a string, a list of token ids, a list of strings, or a list of lists of token ids.
void read_prompts(const json& prompt, const Tokenizer& tokenizer, const RequestLimits& limits,
                  CompletionRequest& out) {
  auto add_text = [&](const std::string& text) {
    check_prompt_bytes(text, limits);
    try {
      out.prompts.push_back(tokenizer.encode(text));
    } catch (const Error& e) {
      throw bad_request(cat("'prompt' cannot be encoded: ", e.message()), "prompt");
    }
    out.prompt_texts.push_back(text);
  };
  auto add_ids = [&](const json& list) {
    out.prompts.push_back(parse_token_ids(list, limits.vocab, "prompt"));
    out.prompt_texts.push_back(tokenizer.decode(out.prompts.back()));
  };
  if (prompt.is_string()) {
    add_text(prompt.get<std::string>());
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number()) {
    add_ids(prompt);
  } else if (prompt.is_array() && !prompt.empty()) {
    // Each is tokenized: their count is bounded before (the choices' bound, checked again with n below).
    if (int64_t(prompt.size()) > limits.max_choices) {
      throw bad_request(cat("the request gives ", prompt.size(), " prompts; this server makes at most ",
                            limits.max_choices, " completions at once"),
                        "prompt");
    }
    for (const json& each : prompt) {
      if (each.is_string()) {
        add_text(each.get<std::string>());
      } else if (each.is_array()) {
        add_ids(each);
      } else {
        throw bad_request("'prompt' must be a string, a list of token ids, or a list of either", "prompt");
      }
    }
  } else {
    throw bad_request("'prompt' must be a string, a list of token ids, or a non-empty list of either",
                      "prompt");
  }
  for (const std::vector<int32_t>& ids : out.prompts)
    if (ids.empty()) throw bad_request("'prompt' is empty: give at least one token", "prompt");
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view body, const Tokenizer& tokenizer,
                                           const RequestLimits& limits) {
  const json doc = parse_request_body(body);
  CompletionRequest out;
  const auto field = [&](const char* name) -> const json* {
    const auto it = doc.find(name);
    return it == doc.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* model = field("model")) {
    if (!model->is_string()) throw bad_request("'model' must be a string", "model");
    out.model = model->get<std::string>();
  }
  const json* prompt = field("prompt");
  if (!prompt) throw bad_request("'prompt' is required", "prompt");
  read_prompts(*prompt, tokenizer, limits, out);
  if (const json* v = field("max_tokens")) out.max_tokens = integer(*v, "max_tokens", 0, limits.context);
  if (const json* v = field("temperature")) out.rule.temperature = number(*v, "temperature", 0, 2);
  if (const json* v = field("top_p")) out.rule.top_p = number(*v, "top_p", 1e-9, 1);
  if (const json* v = field("top_k")) {
    // vLLM's convention: -1 (or 0) is no limit.
    const int64_t k = integer(*v, "top_k", -1, limits.vocab);
    out.rule.top_k = std::max<int64_t>(k, 0);
  }
  if (const json* v = field("seed")) out.seed = uint64_t(integer(*v, "seed", INT64_MIN, INT64_MAX));
  if (const json* v = field("n")) out.n = integer(*v, "n", 1, limits.max_choices);
  if (const json* v = field("stream")) out.stream = boolean(*v, "stream");
  if (const json* v = field("echo")) out.echo = boolean(*v, "echo");
  if (const json* v = field("logprobs")) {
    // OpenAI's completions take a count; a boolean true (the chat API's form) means the token's own only.
    out.logprobs = v->is_boolean() ? (v->get<bool>() ? std::optional<int64_t>(0) : std::nullopt)
                                   : std::optional<int64_t>(integer(*v, "logprobs", 0, 20));
  }
  if (const json* v = field("stop")) {
    const json list = v->is_string() ? json::array({*v}) : *v;
    // OpenAI allows 4; clients such as lm-evaluation-harness add the end-of-text string to a task's own.
    if (!list.is_array() || list.size() > 64)
      throw bad_request("'stop' must be a string or up to 64 strings", "stop");
    for (const json& stop : list) {
      if (!stop.is_string() || stop.get<std::string>().empty())
        throw bad_request("'stop' must hold non-empty strings", "stop");
      out.stop.push_back(stop.get<std::string>());
    }
  }
  if (int64_t(out.prompts.size()) * out.n > limits.max_choices) {
    throw bad_request(cat("the request asks for ", out.prompts.size(), " prompts x ", out.n,
                          " completions; this server makes at most ", limits.max_choices, " at once"),
                      "n");
  }
  for (const std::vector<int32_t>& ids : out.prompts) {
    if (int64_t(ids.size()) + out.max_tokens > limits.context) {
      throw bad_request(
          cat("this model's maximum context length is ", limits.context, " tokens; the request has ",
              ids.size(), " in its prompt and asks for ", out.max_tokens, " more"),
          "prompt");
    }
  }
  return out;
}

}  // namespace zaya
