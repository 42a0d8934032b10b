#include "serve/completion_choice.h"

#include "tokenizer/tokenizer.h"

namespace zaya {

using json = nlohmann::json;

CompletionChoice::CompletionChoice(const Tokenizer& tokenizer, const CompletionRequest& request,
                                   size_t prompt, int64_t index)
    : tokenizer_(tokenizer), request_(request), index_(index), prompt_text_(request.prompt_texts[prompt]) {
  if (!request.echo) next_offset_ = int64_t(prompt_text_.size());
  if (request.echo && request.logprobs) {
    // The prompt's first token has no log-probability (nothing before it); the engine scores the rest.
    add_logprob(token_text(request.prompts[prompt][0]), nullptr);
    prompt_tokens_ = request.prompts[prompt];
  }
}

std::string CompletionChoice::token_text(int32_t id) const {
  return tokenizer_.decode({id});
}

void CompletionChoice::add_logprob(const std::string& token, const TokenLogprobs* scored) {
  tokens_.push_back(token);
  text_offsets_.push_back(next_offset_);
  next_offset_ += int64_t(token.size());
  if (!scored) {
    token_logprobs_.push_back(nullptr);
    top_logprobs_.push_back(nullptr);
    return;
  }
  token_logprobs_.push_back(scored->token);
  json top = json::object();
  // Distinct ids can print alike (pieces of one character); the likelier keeps the key.
  for (const auto& [id, logprob] : scored->top) {
    const std::string key = token_text(id);
    if (!top.contains(key)) top[key] = logprob;
  }
  top_logprobs_.push_back(std::move(top));
}

bool CompletionChoice::apply(const SequenceEvent& event) {
  switch (event.kind) {
    case SequenceEvent::Kind::PromptScored:
      for (size_t i = 0; i < event.prompt.size(); ++i)
        add_logprob(token_text(prompt_tokens_[i + 1]), &event.prompt[i]);
      return true;
    case SequenceEvent::Kind::Token: {
      if (request_.logprobs) add_logprob(token_text(event.token), &event.logprobs);
      generated_.push_back(event.token);
      // The text so far, without the end-of-text token; cut at the first stop string.
      text_ = tokenizer_.decode(generated_, true);
      size_t cut = std::string::npos;
      for (const std::string& stop : request_.stop) cut = std::min(cut, text_.find(stop));
      if (cut == std::string::npos) return true;
      text_.resize(cut);
      finish_reason_ = "stop";
      ended_ = true;
      return false;
    }
    case SequenceEvent::Kind::Finished:
      finish_reason_ = event.finish_reason;
      ended_ = true;
      return false;
    case SequenceEvent::Kind::Failed:
      error_ = event.error;
      ended_ = true;
      return false;
  }
  return false;
}

json CompletionChoice::logprobs_from(size_t first) const {
  if (!request_.logprobs) return nullptr;
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (size_t i = first; i < tokens_.size(); ++i) {
    out["tokens"].push_back(tokens_[i]);
    out["token_logprobs"].push_back(token_logprobs_[i]);
    out["top_logprobs"].push_back(top_logprobs_[i]);
    out["text_offset"].push_back(text_offsets_[i]);
  }
  return out;
}

json CompletionChoice::whole() const {
  return {{"index", index_},
          {"text", request_.echo ? prompt_text_ + text_ : text_},
          {"logprobs", logprobs_from(0)},
          {"finish_reason", finish_reason_.empty() ? json(nullptr) : json(finish_reason_)}};
}

json CompletionChoice::next_delta() {
  if (sent_end_) return nullptr;
  sent_text_ = std::min(sent_text_, text_.size());  // a decoder may have rewritten the text's end
  size_t longest_stop = 0;
  for (const std::string& stop : request_.stop) longest_stop = std::max(longest_stop, stop.size());
  size_t ready = text_.size();
  if (!ended_) {
    const size_t held_back = longest_stop > 0 ? longest_stop - 1 : 0;
    ready = Tokenizer::settled_length(
        std::string_view(text_).substr(0, ready > held_back ? ready - held_back : 0));
    ready = std::max(sent_text_, ready);
  }
  std::string text = text_.substr(sent_text_, ready - sent_text_);
  if (request_.echo && !sent_prompt_) text = prompt_text_ + text;
  const bool new_entries = sent_entries_ < tokens_.size();
  if (text.empty() && !new_entries && !ended_) return nullptr;
  json delta = {{"index", index_},
                {"text", text},
                {"logprobs", logprobs_from(sent_entries_)},
                {"finish_reason", ended_ && !failed() ? json(finish_reason_) : json(nullptr)}};
  sent_text_ = ready;
  sent_entries_ = tokens_.size();
  sent_prompt_ = true;
  sent_end_ = ended_;
  return delta;
}

}  // namespace zaya
