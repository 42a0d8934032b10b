// zaya serve's core without HTTP: request bodies read and refused as OpenAI's API does, the decode engine
// (sequences decoded together give each the tokens it gets alone; cancel, deadlines, a full queue), and
// choices built from events (stop strings, streamed pieces that add up to the whole).

#include <gtest/gtest.h>

#include <thread>

#include "backend/ops.h"
#include "core/error.h"
#include "infer/generator.h"
#include "io/hf_config.h"
#include "model/model_dims.h"
#include "model/model_io.h"
#include "model/parameters.h"
#include "model/zaya_model.h"
#include "serve/completion_choice.h"
#include "serve/completion_request.h"
#include "serve/decode_engine.h"
#include "tokenizer/tokenizer.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

using Clock = std::chrono::steady_clock;

const Tokenizer& byte_level() {
  static const Tokenizer tokenizer = Tokenizer::load(test::fixture("tokenizer/byte_level.json"));
  return tokenizer;
}

const RequestLimits kLimits{64, 6000, 8};

CompletionRequest parse(const std::string& body) {
  return parse_completion_request(body, byte_level(), kLimits);
}

// The ApiError's parameter and status for a body that must be refused.
std::pair<int, std::string> refusal(const std::string& body) {
  try {
    parse(body);
  } catch (const ApiError& e) {
    return {e.status, e.param};
  }
  return {0, "accepted"};
}

TEST(CompletionRequest, ReadsEveryPromptFormAndField) {
  const CompletionRequest text = parse(R"({"prompt": "Hello world", "model": "m"})");
  ASSERT_EQ(text.prompts.size(), 1u);
  EXPECT_EQ(text.prompts[0], byte_level().encode("Hello world"));
  EXPECT_EQ(text.max_tokens, 16);
  EXPECT_EQ(text.rule.temperature, 1.0);
  EXPECT_EQ(text.model, "m");
  const std::vector<int32_t> hello = byte_level().encode("Hello world");
  const CompletionRequest ids = parse(R"({"prompt": )" + nlohmann::json(hello).dump() +
                                      R"(, "max_tokens": 0, "echo": true, "logprobs": 3})");
  EXPECT_EQ(ids.prompts[0], hello);
  EXPECT_EQ(ids.prompt_texts[0], "Hello world");
  EXPECT_EQ(ids.max_tokens, 0);
  EXPECT_TRUE(ids.echo);
  EXPECT_EQ(ids.logprobs, 3);
  const CompletionRequest many = parse(
      R"({"prompt": [[1, 2], "a b", [3]], "n": 2, "stop": "\n", "seed": 5, "top_k": -1, "top_p": 0.5,
          "temperature": 0, "stream": true, "user": "ignored", "presence_penalty": 0})");
  EXPECT_EQ(many.prompts.size(), 3u);
  EXPECT_EQ(many.n, 2);
  EXPECT_EQ(many.stop, std::vector<std::string>({"\n"}));
  EXPECT_EQ(many.seed, 5u);
  EXPECT_EQ(many.rule.top_k, 0);
  EXPECT_EQ(many.rule.top_p, 0.5);
  EXPECT_TRUE(many.stream);
}

TEST(CompletionRequest, RefusesWhatItCannotServeNamingTheField) {
  EXPECT_EQ(refusal("{\"prompt\": "), std::make_pair(400, std::string()));
  EXPECT_EQ(refusal("[1, 2]"), std::make_pair(400, std::string()));
  EXPECT_EQ(refusal(std::string(100000, '[') + std::string(100000, ']')), std::make_pair(400, std::string()));
  EXPECT_EQ(refusal("{}").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": ""})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": []})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": [1, 6000]})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": [1, -1]})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": [1, 1.5]})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": [{"a": 1}]})").second, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": "a", "max_tokens": -1})").second, "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "a", "max_tokens": "5"})").second, "max_tokens");
  EXPECT_EQ(refusal(R"({"prompt": "a", "max_tokens": 18446744073709551615})").second, "max_tokens");
  // 60 prompt tokens and 10 more do not fit a context of 64.
  std::string sixty = "1";
  for (int i = 1; i < 60; ++i) sixty += ", 1";
  EXPECT_EQ(refusal(R"({"prompt": [)" + sixty + R"(], "max_tokens": 10})"),
            std::make_pair(400, std::string("prompt")));
  EXPECT_EQ(refusal(R"({"prompt": [)" + sixty + R"(], "max_tokens": 4})").first, 0);
  EXPECT_EQ(refusal(R"({"prompt": "a", "temperature": -0.1})").second, "temperature");
  EXPECT_EQ(refusal(R"({"prompt": "a", "temperature": "hot"})").second, "temperature");
  EXPECT_EQ(refusal(R"({"prompt": "a", "top_p": 0})").second, "top_p");
  EXPECT_EQ(refusal(R"({"prompt": "a", "n": 0})").second, "n");
  EXPECT_EQ(refusal(R"({"prompt": ["a", "b", "c"], "n": 3})").second, "n");  // 9 choices > 8
  EXPECT_EQ(refusal(R"({"prompt": "a", "logprobs": 21})").second, "logprobs");
  EXPECT_EQ(refusal(R"({"prompt": "a", "stream": "yes"})").second, "stream");
  EXPECT_EQ(refusal(R"({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]})").first, 0);
  EXPECT_EQ(
      refusal(R"({"prompt": "a", "stop": )" + nlohmann::json(std::vector<std::string>(65, "x")).dump() + "}")
          .second,
      "stop");
  EXPECT_EQ(refusal(R"({"prompt": "a", "stop": 3})").second, "stop");
  EXPECT_EQ(refusal(R"({"prompt": "a", "stop": [""]})").second, "stop");
  EXPECT_EQ(refusal(R"({"prompt": "a", "model": 3})").second, "model");
  EXPECT_EQ(refusal("{\"prompt\": \"\xff\"}").second, "");  // invalid UTF-8 is not JSON
}

SequenceEvent token_event(int32_t id) {
  SequenceEvent event;
  event.token = id;
  event.logprobs.token = -1.0;
  event.logprobs.top = {{id, -1.0}};
  return event;
}

TEST(CompletionChoice, StreamsOnlyTextThatMoreTokensCannotChange) {
  const std::string text = "a\xc3\xa9\xe2\x82\xac";  // a, é, €
  EXPECT_EQ(Tokenizer::settled_length(text), 6u);
  EXPECT_EQ(Tokenizer::settled_length(text.substr(0, 5)), 3u);
  EXPECT_EQ(Tokenizer::settled_length(text.substr(0, 4)), 3u);
  EXPECT_EQ(Tokenizer::settled_length(text.substr(0, 2)), 1u);
  EXPECT_EQ(Tokenizer::settled_length("ab\xef\xbf\xbd\xef\xbf\xbd"), 2u);  // a split character, as decoded
  // The first byte of a two-byte character decodes to U+FFFD, the second completes it: the stream sends the
  // character once, whole.
  CompletionRequest request = parse(R"({"prompt": "x"})");
  CompletionChoice choice(byte_level(), request, 0, 0);
  std::string pieces;
  for (int32_t id : byte_level().encode("wo\xc4\x82"
                                        "d")) {
    choice.apply(token_event(id));
    for (nlohmann::json delta = choice.next_delta(); !delta.is_null(); delta = choice.next_delta())
      pieces += delta["text"].get<std::string>();
  }
  SequenceEvent end;
  end.kind = SequenceEvent::Kind::Finished;
  end.finish_reason = "length";
  choice.apply(end);
  for (nlohmann::json delta = choice.next_delta(); !delta.is_null(); delta = choice.next_delta())
    pieces += delta["text"].get<std::string>();
  EXPECT_EQ(pieces,
            "wo\xc4\x82"
            "d");
  EXPECT_EQ(choice.whole()["text"], pieces);
}

TEST(CompletionChoice, StopStringsCutTheTextAndStreamedPiecesAddUpToIt) {
  CompletionRequest request = parse(R"({"prompt": "Say:", "stop": ["END"], "echo": true, "logprobs": 1})");
  const std::vector<int32_t> said = byte_level().encode(" one two ENDING three");
  CompletionChoice whole(byte_level(), request, 0, 0), streamed(byte_level(), request, 0, 0);
  SequenceEvent scored;
  scored.kind = SequenceEvent::Kind::PromptScored;
  scored.prompt.resize(request.prompts[0].size() - 1);
  whole.apply(scored);
  streamed.apply(scored);
  std::string pieces;
  bool ended = false;
  for (int32_t id : said) {
    const bool more = whole.apply(token_event(id));
    streamed.apply(token_event(id));
    for (nlohmann::json delta = streamed.next_delta(); !delta.is_null(); delta = streamed.next_delta())
      pieces += delta["text"].get<std::string>();
    if (!more) {
      ended = true;
      break;
    }
  }
  ASSERT_TRUE(ended);
  const nlohmann::json choice = whole.whole();
  EXPECT_EQ(choice["text"], "Say: one two ");
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(pieces, "Say: one two ");
  // Logprob entries: every prompt token (the first without one), then each generated token.
  const nlohmann::json& logprobs = choice["logprobs"];
  EXPECT_TRUE(logprobs["token_logprobs"][0].is_null());
  EXPECT_EQ(logprobs["tokens"].size(), request.prompts[0].size() + size_t(whole.completion_tokens()));
  EXPECT_EQ(logprobs["text_offset"][1], byte_level().decode({request.prompts[0][0]}).size());
}

ParameterStore& initialised(ParameterStore& params) {
  init_parameters(params, 0.5, 1);
  return params;
}

// A small random model (the tiny preset).
struct TinyModel {
  ParameterStore params{model_dims(preset_config("tiny"))};
  ZayaModel model{initialised(params), cpu_ops()};
};

SequenceRequest request_for(std::vector<int32_t> prompt, int64_t max_tokens, double temperature,
                            uint64_t seed) {
  SequenceRequest request;
  request.prompt = std::move(prompt);
  request.max_tokens = max_tokens;
  request.rule.temperature = temperature;
  request.rule.top_p = 1.0;
  request.seed = seed;
  request.deadline = Clock::now() + std::chrono::seconds(60);
  return request;
}

// The engine's loop on a thread of its own for the life of a test.
class EngineThread {
 public:
  explicit EngineThread(DecodeEngine& engine) : engine_(engine), thread_([&engine] { engine.run(); }) {}
  ~EngineThread() {
    engine_.stop();
    thread_.join();
  }

 private:
  DecodeEngine& engine_;
  std::thread thread_;
};

std::shared_ptr<Sequence> sequence(std::vector<int32_t> prompt, int64_t max_tokens, double temperature,
                                   uint64_t seed) {
  return std::make_shared<Sequence>(request_for(std::move(prompt), max_tokens, temperature, seed));
}

// The sequence's next event, or nullopt when none comes within 60 s (the server reads its mailboxes when the
// engine says they changed; a test polls).
std::optional<SequenceEvent> next_event(Sequence& sequence) {
  const auto until = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    if (std::optional<SequenceEvent> event = sequence.try_next_event()) return event;
    if (Clock::now() > until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Every event until the end: the tokens, and the last event's kind.
std::pair<std::vector<int32_t>, SequenceEvent> drain(Sequence& sequence) {
  std::vector<int32_t> tokens;
  for (;;) {
    std::optional<SequenceEvent> event = next_event(sequence);
    if (!event) {
      SequenceEvent none;
      none.kind = SequenceEvent::Kind::Failed;
      none.error = "no event in 60 s";
      return {tokens, none};
    }
    if (event->kind == SequenceEvent::Kind::Token) tokens.push_back(event->token);
    if (event->kind == SequenceEvent::Kind::Finished || event->kind == SequenceEvent::Kind::Failed)
      return {tokens, *event};
  }
}

TEST(DecodeEngine, SequencesDecodedTogetherGetTheTokensTheyGetAlone) {
  TinyModel tiny;
  const int64_t vocab = tiny.params.dims().vocab;
  // Prompts of different lengths, greedy and sampled, submitted at different moments.
  std::vector<std::shared_ptr<Sequence>> sequences;
  std::vector<std::vector<int32_t>> want;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> prompt;
    for (int t = 0; t < 2 + 3 * i; ++t) prompt.push_back(int32_t((7 * i + 13 * t + 1) % vocab));
    const double temperature = i % 2 ? 0.9 : 0.0;
    SamplingOptions alone;
    alone.max_new_tokens = 10 + i;
    alone.temperature = temperature;
    alone.top_p = 1.0;
    alone.seed = uint64_t(40 + i);
    want.push_back(generate(tiny.model, prompt, alone));
    sequences.push_back(sequence(prompt, alone.max_new_tokens, temperature, alone.seed));
  }
  DecodeEngine engine(tiny.model, {4, 16});
  EngineThread running(engine);
  ASSERT_TRUE(engine.submit({sequences[0], sequences[1], sequences[2]}));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(engine.submit({sequences[3], sequences[4], sequences[5]}));
  for (size_t i = 0; i < sequences.size(); ++i) {
    const auto [tokens, end] = drain(*sequences[i]);
    EXPECT_EQ(end.kind, SequenceEvent::Kind::Finished) << end.error;
    EXPECT_EQ(end.finish_reason, "length");
    EXPECT_EQ(tokens, want[i]) << "sequence " << i;
  }
  EXPECT_GT(engine.counters().decode_steps.load(), 0);
}

// The warm-up before a server's first request runs the model on prompts of its own: the tokens and
// log-probabilities a request then gets are those it gets from a model never warmed. (A context of 8 makes
// its prompts 7 tokens; of 1, it has no room for one and does nothing.)
TEST(DecodeEngine, WarmUpChangesNoAnswer) {
  TinyModel cold, warmed;
  warm_up(warmed.model, {8, 16}, 4096);
  warm_up(warmed.model, {1, 16}, 8);
  warm_up(warmed.model, {8, 16}, 1);
  const int64_t vocab = cold.params.dims().vocab;
  for (int i = 0; i < 2; ++i) {
    std::vector<int32_t> prompt;
    for (int t = 0; t < 5 + 20 * i; ++t) prompt.push_back(int32_t((11 * i + 17 * t + 3) % vocab));
    SamplingOptions options;
    options.max_new_tokens = 12;
    options.temperature = i ? 0.8 : 0.0;
    options.top_p = 1.0;
    options.seed = uint64_t(7 + i);
    EXPECT_EQ(generate(warmed.model, prompt, options), generate(cold.model, prompt, options))
        << "prompt " << i;
    DecodeCache cold_cache = make_decode_cache(cold.params.dims(), int64_t(prompt.size()));
    DecodeCache warmed_cache = make_decode_cache(warmed.params.dims(), int64_t(prompt.size()));
    const float* cold_logits = cold.model.prefill(prompt.data(), int64_t(prompt.size()), cold_cache,
                                                  ZayaModel::PrefillLogits::Every);
    const std::vector<float> want(cold_logits, cold_logits + prompt.size() * size_t(vocab));
    const float* warmed_logits = warmed.model.prefill(prompt.data(), int64_t(prompt.size()), warmed_cache,
                                                      ZayaModel::PrefillLogits::Every);
    EXPECT_EQ(std::vector<float>(warmed_logits, warmed_logits + want.size()), want) << "prompt " << i;
  }
}

TEST(DecodeEngine, ScoresPromptsCancelsAndKeepsDeadlinesAndItsQueueLimit) {
  TinyModel tiny;
  DecodeEngine engine(tiny.model, {2, 3});
  EngineThread running(engine);
  // max_tokens 0 with score_prompt: the prompt's log-probabilities, then the end.
  SequenceRequest scoring = request_for({5, 6, 7, 8}, 0, 0.0, 1);
  scoring.score_prompt = true;
  auto scored = std::make_shared<Sequence>(scoring);
  ASSERT_TRUE(engine.submit({scored}));
  std::optional<SequenceEvent> first = next_event(*scored);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->kind, SequenceEvent::Kind::PromptScored);
  EXPECT_EQ(first->prompt.size(), 3u);
  EXPECT_EQ(drain(*scored).second.finish_reason, "length");
  // A cancelled sequence stops producing; a sequence past its deadline fails with the reason.
  auto cancelled = sequence({5, 6}, 100000, 0.0, 1);
  SequenceRequest overdue = request_for({5, 6}, 50, 0.0, 1);
  overdue.deadline = Clock::now() - std::chrono::seconds(1);
  auto late = std::make_shared<Sequence>(overdue);
  ASSERT_TRUE(engine.submit({cancelled, late}));
  ASSERT_TRUE(next_event(*cancelled));
  cancelled->cancel();
  const auto [late_tokens, late_end] = drain(*late);
  EXPECT_EQ(late_end.kind, SequenceEvent::Kind::Failed);
  EXPECT_NE(late_end.error.find("out of time"), std::string::npos);
  EXPECT_GE(engine.counters().timeouts.load(), 1);
  // Four at once do not fit a queue of three.
  EXPECT_FALSE(engine.submit(
      {sequence({1}, 1, 0, 1), sequence({1}, 1, 0, 1), sequence({1}, 1, 0, 1), sequence({1}, 1, 0, 1)}));
}

}  // namespace
}  // namespace zaya
