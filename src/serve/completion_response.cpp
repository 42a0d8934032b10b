#include "serve/completion_response.h"

#include "tokenizer/tokenizer.h"

namespace zaya {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

CompletionResponse::CompletionResponse(const Tokenizer& tokenizer,
                                       std::unique_ptr<const CompletionRequest> request,
                                       std::vector<std::shared_ptr<Sequence>> sequences, CompletionInfo info,
                                       Finished finished)
    : request_(std::move(request)),
      sequences_(std::move(sequences)),
      info_(std::move(info)),
      finished_(std::move(finished)) {
  choices_.reserve(sequences_.size());
  for (size_t i = 0; i < sequences_.size(); ++i)
    choices_.emplace_back(tokenizer, *request_, i / size_t(request_->n), int64_t(i));
}

CompletionResponse::~CompletionResponse() {
  abandon();
}

void CompletionResponse::abandon() {
  for (const std::shared_ptr<Sequence>& sequence : sequences_) sequence->cancel();
}

double CompletionResponse::seconds_since_start() const {
  return std::chrono::duration<double>(Clock::now() - info_.start).count();
}

json CompletionResponse::usage(int64_t completion_tokens) const {
  int64_t prompt_tokens = 0;
  for (const std::vector<int32_t>& prompt : request_->prompts) prompt_tokens += int64_t(prompt.size());
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

std::string CompletionResponse::chunk(const json& choice) const {
  return "data: " +
         dump_json({{"id", info_.id},
                    {"object", "text_completion"},
                    {"created", info_.created},
                    {"model", info_.model},
                    {"choices", json::array({choice})}}) +
         "\n\n";
}

bool CompletionResponse::take_events(ResponseWriter* stream) {
  CompletionChoice& choice = choices_[current_];
  while (!stream || stream->buffered() < kPumpBytes) {
    const std::optional<SequenceEvent> event = sequences_[current_]->try_next_event();
    if (!event) return false;
    if (first_token_s_ < 0 && event->kind == SequenceEvent::Kind::Token)
      first_token_s_ = seconds_since_start();
    const bool more = choice.apply(*event);
    if (stream) {
      if (!more && choice.failed()) {
        stream->chunk(
            "data: " + dump_json({{"error", {{"message", choice.error()}, {"type", "server_error"}}}}) +
            "\n\n");
      } else if (const json delta = choice.next_delta(); !delta.is_null()) {
        stream->chunk(chunk(delta));
      }
    }
    if (!more) {
      sequences_[current_]->cancel();  // ended here (a stop string): the engine drops it
      return true;
    }
  }
  return false;
}

bool CompletionResponse::pump(ResponseWriter& writer) {
  return request_->stream ? pump_stream(writer) : pump_whole(writer);
}

bool CompletionResponse::pump_whole(ResponseWriter& writer) {
  while (current_ < sequences_.size()) {
    if (!take_events(nullptr)) {
      if (Clock::now() < info_.give_up) return false;
      abandon();
      write_api_error(writer, ApiError(504, "timeout", "the model did not answer in time"));
      return true;
    }
    if (choices_[current_].failed()) {
      abandon();
      write_api_error(writer, ApiError(500, "server_error", choices_[current_].error()));
      return true;
    }
    ++current_;
  }
  json body = {
      {"id", info_.id}, {"object", "text_completion"}, {"created", info_.created}, {"model", info_.model}};
  body["choices"] = json::array();
  int64_t completion_tokens = 0;
  for (const CompletionChoice& choice : choices_) {
    body["choices"].push_back(choice.whole());
    completion_tokens += choice.completion_tokens();
  }
  body["usage"] = usage(completion_tokens);
  writer.whole(200, "application/json", dump_json(body));
  finished_(seconds_since_start(), first_token_s_);
  return true;
}

bool CompletionResponse::pump_stream(ResponseWriter& writer) {
  if (!begun_) {
    writer.begin_stream(200, "text/event-stream");
    begun_ = true;
  }
  while (current_ < sequences_.size() && writer.buffered() < kPumpBytes) {
    if (!take_events(&writer)) break;
    ++current_;
  }
  if (current_ < sequences_.size()) {
    if (Clock::now() < info_.give_up) return false;
    abandon();
    writer.chunk(
        "data: " +
        dump_json({{"error", {{"message", "the model did not answer in time"}, {"type", "timeout"}}}}) +
        "\n\n");
    writer.end_stream();
    return true;
  }
  writer.chunk("data: [DONE]\n\n");
  writer.end_stream();
  finished_(seconds_since_start(), first_token_s_);
  return true;
}

}  // namespace zaya
