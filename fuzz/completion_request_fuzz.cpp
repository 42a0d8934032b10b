// A POST /v1/completions body as zaya serve handles it without the model: read and checked (a refusal is an
// ApiError, nothing else), then each of its choices built from made-up events (the prompt scored, its own
// tokens generated, the end), whole and streamed; the streamed pieces must add up to the whole text.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serve/completion_choice.h"
#include "serve/completion_request.h"
#include "tokenizer/tokenizer.h"

namespace {

const zaya::Tokenizer& tokenizer() {
  static const zaya::Tokenizer loaded = zaya::Tokenizer::load(ZAYA_FUZZ_TOKENIZER);
  return loaded;
}

zaya::TokenLogprobs scored(int32_t id, int64_t alternatives) {
  zaya::TokenLogprobs out;
  out.token = -1.5;
  for (int64_t k = 0; k < alternatives; ++k) out.top.emplace_back(int32_t((id + k) % 256), -1.0 - double(k));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const zaya::RequestLimits limits{256, tokenizer().vocab_size(), 16};
  zaya::CompletionRequest request;
  try {
    request = zaya::parse_completion_request(std::string_view(reinterpret_cast<const char*>(data), size),
                                             tokenizer(), limits);
  } catch (const zaya::ApiError& e) {
    if (e.status < 400 || e.status > 499) __builtin_trap();
    return 0;
  }
  const auto dump = [](const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  const int64_t alternatives = request.logprobs.value_or(0);
  for (size_t p = 0; p < request.prompts.size(); ++p) {
    const std::vector<int32_t>& prompt = request.prompts[p];
    zaya::CompletionChoice whole(tokenizer(), request, p, 0), streamed(tokenizer(), request, p, 0);
    std::string pieces;
    auto apply = [&](const zaya::SequenceEvent& event) {
      const bool more = whole.apply(event);
      streamed.apply(event);
      for (nlohmann::json delta = streamed.next_delta(); !delta.is_null(); delta = streamed.next_delta()) {
        pieces += delta["text"].get<std::string>();
        (void)dump(delta);
      }
      return more;
    };
    bool more = true;
    if (request.echo && request.logprobs) {
      zaya::SequenceEvent event;
      event.kind = zaya::SequenceEvent::Kind::PromptScored;
      for (size_t i = 1; i < prompt.size(); ++i) event.prompt.push_back(scored(prompt[i], alternatives));
      more = apply(event);
    }
    // The prompt's own tokens as the completion, as many as max_tokens allows.
    for (size_t i = 0; more && int64_t(i) < std::min<int64_t>(request.max_tokens, 64) && i < prompt.size();
         ++i) {
      zaya::SequenceEvent event;
      event.token = prompt[i];
      event.logprobs = scored(prompt[i], alternatives);
      more = apply(event);
    }
    if (more) {
      zaya::SequenceEvent end;
      end.kind = zaya::SequenceEvent::Kind::Finished;
      end.finish_reason = "length";
      apply(end);
    }
    const nlohmann::json choice = whole.whole();
    (void)dump(choice);
    if (choice["text"].get<std::string>() != pieces) __builtin_trap();
  }
  return 0;
}
