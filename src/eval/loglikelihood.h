#pragma once
// Log-likelihood scoring, as lm-evaluation-harness asks it of a model: the log-probability of a continuation
// given its context, and whether greedy decoding would have produced it; and the rolling log-likelihood of
// a whole text, for perplexity and bits per byte.

#include <cstdint>
#include <string_view>
#include <vector>

namespace zaya {

class Tokenizer;
class ZayaModel;

struct LoglikelihoodRequest {
  std::vector<int32_t> context;  // at least one token
  std::vector<int32_t> continuation;
};

struct LoglikelihoodResult {
  double loglikelihood = 0;  // sum over the continuation's tokens of log p(token | everything before)
  bool greedy = false;       // every continuation token was the most likely one
};

// The tokens of (context, continuation) as lm-evaluation-harness splits them: the context's trailing
// whitespace moves to the continuation, the whole text is encoded once and the continuation is what
// follows the context's own encoding (so a merge across the boundary goes to the continuation). An empty
// context becomes [empty_context_token].
LoglikelihoodRequest encode_pair(const Tokenizer& tokenizer, std::string_view context,
                                 std::string_view continuation, int32_t empty_context_token);

// Scores requests on full forward passes, several sequences per pass (right-padded: causal attention and
// convolution and per-token routing make padding after a sequence invisible to it). A sequence longer than
// max_length keeps its last max_length tokens (the continuation must fit). Throws Error for a token outside
// the model's vocabulary or a continuation longer than max_length.
std::vector<LoglikelihoodResult> score_loglikelihoods(ZayaModel& model,
                                                      const std::vector<LoglikelihoodRequest>& requests,
                                                      int64_t max_length);

// A text's tokens in windows of at most max_length predicted tokens, each token predicted once, as
// lm-evaluation-harness rolls them: the first window after prefix_token, each later one with as much of the
// text before it as fits in max_length inputs (a short last window sees more than the one token before it).
std::vector<LoglikelihoodRequest> rolling_windows(const std::vector<int32_t>& tokens, int64_t max_length,
                                                  int32_t prefix_token);

}  // namespace zaya
