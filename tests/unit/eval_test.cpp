// Scoring for zaya eval and zaya serve: log-likelihoods batched over padded passes against the log-softmax
// of each sequence's own pass, lm-evaluation-harness's context/continuation split, rolling windows, the
// task layouts and their errors.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/ops.h"
#include "core/error.h"
#include "core/rng.h"
#include "eval/loglikelihood.h"
#include "eval/task_file.h"
#include "infer/token_logprobs.h"
#include "model/model_io.h"
#include "model/zaya_model.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace zaya {
namespace {

std::vector<int32_t> ids_of(int64_t count, int64_t vocab, uint64_t stream) {
  const RandomStream rng(9, RngPurpose::Test, stream);
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) ids[size_t(i)] = int32_t(rng.bits(uint64_t(i)) % uint32_t(vocab));
  return ids;
}

// log p(continuation | context) from one unpadded pass over the last max_length input tokens.
double loglikelihood_alone(ZayaModel& model, const LoglikelihoodRequest& request, int64_t max_length) {
  const int64_t vocab = model.params().dims().vocab;
  std::vector<int32_t> all = request.context;
  all.insert(all.end(), request.continuation.begin(), request.continuation.end());
  const int64_t total = int64_t(all.size()), start = std::max<int64_t>(0, total - 1 - max_length);
  const std::vector<int32_t> input(all.begin() + start, all.end() - 1);
  const ForwardResult pass = model.forward({input.data(), nullptr, nullptr, 1, int64_t(input.size())}, true);
  double sum = 0;
  for (int64_t p = total - int64_t(request.continuation.size()); p < total; ++p) {
    const float* row = pass.logits + (p - 1 - start) * vocab;
    double normaliser = 0;
    for (int64_t v = 0; v < vocab; ++v) normaliser += std::exp(double(row[v]));
    sum += double(row[all[size_t(p)]]) - std::log(normaliser);
  }
  return sum;
}

TEST(Loglikelihood, BatchedPaddedPassesEqualEachSequenceAlone) {
  LoadedModel loaded = load_model(test::fixture("model/odd"));
  const int64_t vocab = loaded.params->dims().vocab;
  ZayaModel model(*loaded.params, cpu_ops());
  // Lengths that differ (padding), one longer than max_length (truncated from the left), an empty
  // continuation (log 1).
  const int64_t max_length = 16;
  std::vector<LoglikelihoodRequest> requests;
  const int64_t shapes[][2] = {{5, 3}, {1, 1}, {9, 6}, {20, 4}, {3, 0}, {2, 16}};
  for (size_t i = 0; i < std::size(shapes); ++i)
    requests.push_back({ids_of(shapes[i][0], vocab, 2 * i), ids_of(shapes[i][1], vocab, 2 * i + 1)});
  const std::vector<LoglikelihoodResult> results = score_loglikelihoods(model, requests, max_length);
  ASSERT_EQ(results.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].continuation.empty()) {
      EXPECT_EQ(results[i].loglikelihood, 0.0);
      continue;
    }
    const double want = loglikelihood_alone(model, requests[i], max_length);
    EXPECT_NEAR(results[i].loglikelihood, want, 1e-4 * std::abs(want)) << "request " << i;
  }
  // A continuation is greedy exactly when each of its tokens is the argmax: make one so from the pass.
  LoglikelihoodRequest greedy{ids_of(4, vocab, 99), {}};
  for (int i = 0; i < 3; ++i) {
    const ForwardResult pass =
        model.forward({greedy.context.data(), nullptr, nullptr, 1, int64_t(greedy.context.size())}, true);
    const float* last = pass.logits + (int64_t(greedy.context.size()) - 1) * vocab;
    const int32_t best = int32_t(std::max_element(last, last + vocab) - last);
    greedy.context.push_back(best);
    greedy.continuation.push_back(best);
  }
  greedy.context.resize(4);
  const LoglikelihoodRequest not_greedy{
      greedy.context,
      {greedy.continuation[0], greedy.continuation[1], (greedy.continuation[2] + 1) % int32_t(vocab)}};
  const std::vector<LoglikelihoodResult> flags =
      score_loglikelihoods(model, {greedy, not_greedy}, max_length);
  EXPECT_TRUE(flags[0].greedy);
  EXPECT_FALSE(flags[1].greedy);

  EXPECT_THROW(score_loglikelihoods(model, {{{1}, ids_of(17, vocab, 5)}}, max_length), Error);
  EXPECT_THROW(score_loglikelihoods(model, {{{int32_t(vocab)}, {1}}}, max_length), Error);
}

TEST(Loglikelihood, TokenLogprobsAreTheLogSoftmaxAndItsTopK) {
  const float logits[5] = {1.0f, 3.0f, 3.0f, -2.0f, 0.5f};
  double normaliser = 0;
  for (float z : logits) normaliser += std::exp(double(z));
  const TokenLogprobs scored = token_logprobs(logits, 5, 2, 3);
  EXPECT_NEAR(scored.token, 3.0 - std::log(normaliser), 3e-7);  // the bound of the test below
  EXPECT_FALSE(scored.greedy);                                  // a tie goes to the lower id
  ASSERT_EQ(scored.top.size(), 3u);
  EXPECT_EQ(scored.top[0].first, 1);
  EXPECT_EQ(scored.top[1].first, 2);
  EXPECT_EQ(scored.top[2].first, 0);
  EXPECT_TRUE(token_logprobs(logits, 5, 1, 0).greedy);
  EXPECT_EQ(token_logprobs(logits, 5, 1, 10).top.size(), 5u);
}

// token_logprobs sums f32 exponentials in double. Each term's relative error is under 2 ulp (2.4e-7) plus
// what rounding z - max to f32 does to it (up to 6e-8 (max - z)), so the log-sum-exp, and with it every
// log-probability, is within 2.4e-7 + 6e-8 E[max - z] of the exact one, E weighted by probability. Over rows
// of a 32768-token vocabulary, flat or sharp, that bound holds (~1e-10 is measured; the same exponentials
// summed in f32 lanes miss it by up to 3x). The top 20 alternatives, found in one pass, come in a full
// sort's order.
TEST(Loglikelihood, TokenLogprobsAreWithinTheirBoundOnALargeVocabulary) {
  const int64_t vocab = 32768;
  const RandomStream rng(4, RngPurpose::Test, 0);
  for (double scale : {0.1, 1.0, 8.0}) {
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) logits[size_t(i)] = float(scale * rng.normal(uint64_t(i)));
    const double max = *std::max_element(logits.begin(), logits.end());
    double sum = 0, distance = 0;
    for (float z : logits)
      sum += std::exp(double(z) - max), distance += std::exp(double(z) - max) * (max - z);
    const double bound = 2.4e-7 + 6e-8 * distance / sum;
    for (int32_t token : {0, 1000, 32767}) {
      const double exact = double(logits[size_t(token)]) - max - std::log(sum);
      EXPECT_NEAR(token_logprobs(logits.data(), vocab, token, 0).token, exact, bound)
          << scale << " " << token;
    }
    // The top alternatives are the most likely in order, as a sort of the whole row gives them.
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
    });
    const TokenLogprobs scored = token_logprobs(logits.data(), vocab, 0, 20);
    ASSERT_EQ(scored.top.size(), 20u);
    for (size_t i = 0; i < 20; ++i) EXPECT_EQ(scored.top[i].first, order[i]) << scale << " rank " << i;
  }
}

TEST(Loglikelihood, RollingWindowsPredictEveryTokenOnce) {
  const std::vector<int32_t> tokens = {10, 11, 12, 13, 14, 15, 16};
  const std::vector<LoglikelihoodRequest> windows = rolling_windows(tokens, 3, 7);
  ASSERT_EQ(windows.size(), 3u);
  EXPECT_EQ(windows[0].context, std::vector<int32_t>({7}));
  EXPECT_EQ(windows[0].continuation, std::vector<int32_t>({10, 11, 12}));
  EXPECT_EQ(windows[1].context, std::vector<int32_t>({12}));
  EXPECT_EQ(windows[1].continuation, std::vector<int32_t>({13, 14, 15}));
  // The short last window reads the max_length (3) tokens before its one token, all of them context.
  EXPECT_EQ(windows[2].context, std::vector<int32_t>({13, 14, 15}));
  EXPECT_EQ(windows[2].continuation, std::vector<int32_t>({16}));
  EXPECT_EQ(rolling_windows({10, 11}, 3, 7).size(), 1u);
  EXPECT_TRUE(rolling_windows({}, 3, 7).empty());
}

TEST(Loglikelihood, ContextAndContinuationSplitAsTheHarnessSplitsThem) {
  const Tokenizer tokenizer = Tokenizer::load(test::fixture("tokenizer/gpt2.json"));
  // The context's trailing space moves to the continuation: " Paris" is one token, not "" + "Paris".
  const LoglikelihoodRequest moved = encode_pair(tokenizer, "The capital is ", "Paris", 0);
  EXPECT_EQ(moved.context, tokenizer.encode("The capital is"));
  EXPECT_EQ(moved.continuation, tokenizer.encode(" Paris"));
  // The continuation is what follows the context's tokens in the whole text's encoding.
  const LoglikelihoodRequest plain = encode_pair(tokenizer, "Question: 2+2\nAnswer:", " 4", 0);
  std::vector<int32_t> whole = plain.context;
  whole.insert(whole.end(), plain.continuation.begin(), plain.continuation.end());
  EXPECT_EQ(whole, tokenizer.encode("Question: 2+2\nAnswer: 4"));
  const LoglikelihoodRequest empty = encode_pair(tokenizer, "", "Hello", 50256);
  EXPECT_EQ(empty.context, std::vector<int32_t>({50256}));
  EXPECT_EQ(empty.continuation, tokenizer.encode("Hello"));
}

TEST(TaskFile, ReadsTheThreeLayouts) {
  const TaskFile arc = read_task_file(test::fixture("eval/arc.jsonl"));
  EXPECT_EQ(arc.layout, TaskLayout::Arc);
  EXPECT_EQ(arc.items.size(), 6u);
  EXPECT_EQ(arc.items[0].context.rfind("Question: ", 0), 0u);
  EXPECT_EQ(arc.items[0].context.substr(arc.items[0].context.size() - 8), "\nAnswer:");
  EXPECT_EQ(read_task_file(test::fixture("eval/hellaswag.jsonl")).layout, TaskLayout::HellaSwag);
  const TaskFile mmlu = read_task_file(test::fixture("eval/mmlu.jsonl"), 2);
  EXPECT_EQ(mmlu.layout, TaskLayout::Mmlu);
  EXPECT_EQ(mmlu.items.size(), 2u);

  test::TempDir dir;
  auto error_of = [&](const std::string& text) {
    test::write_bytes(dir.file("t.jsonl"), text);
    try {
      read_task_file(dir.file("t.jsonl"));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string arc_line =
      R"({"question": "Q?", "choices": {"text": ["a", "b"], "label": ["A", "B"]}, "answerKey": "B"})";
  test::write_bytes(dir.file("ok.jsonl"), arc_line + "\n\n" + arc_line + "\n");
  const TaskFile ok = read_task_file(dir.file("ok.jsonl"));
  EXPECT_EQ(ok.items.size(), 2u);
  EXPECT_EQ(ok.items[1].label, 1);
  EXPECT_NE(error_of(R"({"question": "Q?", "choices": {"text": ["a"], "label": ["A"]}, "answerKey": "C"})")
                .find("answerKey"),
            std::string::npos);
  EXPECT_NE(error_of(arc_line + "\n{\"ctx\": \"x\", \"endings\": [\"y\"], \"label\": 0}").find("line 2"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"ctx": "x", "endings": ["y", "z"], "label": 2})").find("label"), std::string::npos);
  EXPECT_NE(error_of(R"({"ctx": "x", "endings": [], "label": 0})").find("endings"), std::string::npos);
  EXPECT_NE(error_of(R"({"question": "x", "choices": ["a", 3], "answer": 0})").find("choices[1]"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"text": "x"})").find("not a task layout"), std::string::npos);
  EXPECT_NE(error_of("{\"ctx\": ").find("line 1"), std::string::npos);
  EXPECT_NE(error_of("\n\n").find("no task items"), std::string::npos);
}

}  // namespace
}  // namespace zaya
