#pragma once
// One choice of a completion as the client sees it, built from its sequence's events: the text (cut at a
// stop string), the logprobs in OpenAI's completions layout (tokens, token_logprobs, top_logprobs,
// text_offset), the finish reason; whole for a response, or piece by piece for a stream.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/completion_request.h"
#include "serve/decode_engine.h"

namespace zaya {

class Tokenizer;

class CompletionChoice {
 public:
  CompletionChoice(const Tokenizer& tokenizer, const CompletionRequest& request, size_t prompt,
                   int64_t index);

  // Takes the sequence's next event; false once the choice has ended (finished, failed, or reached a stop
  // string: the caller then cancels the sequence).
  bool apply(const SequenceEvent& event);
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  int64_t completion_tokens() const { return int64_t(generated_.size()); }

  // The whole choice: {"index", "text", "logprobs", "finish_reason"}.
  nlohmann::json whole() const;
  // For a stream: what has not been sent yet and may be (text that could still turn out to begin a stop
  // string, or a character whose last bytes have not come, waits), or null when there is nothing new.
  nlohmann::json next_delta();

 private:
  void add_logprob(const std::string& token, const TokenLogprobs* scored);
  std::string token_text(int32_t id) const;
  nlohmann::json logprobs_from(size_t first) const;

  const Tokenizer& tokenizer_;
  const CompletionRequest& request_;
  int64_t index_;
  std::string prompt_text_;             // with echo, the text starts with it
  std::vector<int32_t> prompt_tokens_;  // with echo and logprobs, to name the scored prompt tokens
  std::vector<int32_t> generated_;
  std::string text_;  // the generated text, cut at a stop string
  std::string finish_reason_, error_;
  bool ended_ = false;
  // Logprob entries, one per token (prompt tokens first with echo).
  std::vector<std::string> tokens_;
  nlohmann::json token_logprobs_ = nlohmann::json::array(), top_logprobs_ = nlohmann::json::array();
  std::vector<int64_t> text_offsets_;
  int64_t next_offset_ = 0;
  // Streaming: how much of the text and of the logprob entries has been sent.
  size_t sent_text_ = 0, sent_entries_ = 0;
  bool sent_prompt_ = false, sent_end_ = false;
};

}  // namespace zaya
