#pragma once
// Reading a row of logits: the most likely token, and the log-probabilities a scoring request asks of each
// position (the given token's, and the most likely alternatives).

#include <cstdint>
#include <utility>
#include <vector>

namespace zaya {

// The ranking of tokens that every choice of them follows (greedy, sampling, top alternatives): a larger
// logit first, a NaN logit last, ties to the lower id.
inline float logit_rank(float logit) {
  return logit == logit ? logit : -__builtin_inff();
}
inline bool ranks_before(const float* logits, int32_t a, int32_t b) {
  const float x = logit_rank(logits[a]), y = logit_rank(logits[b]);
  return x != y ? x > y : a < b;
}

// The first id of the largest logit (NaN logits never are; 0 when no logit compares).
int32_t most_likely_token(const float* logits, int64_t vocab);

struct TokenLogprobs {
  double token = 0;                             // log p(token)
  bool greedy = false;                          // the token is the most likely one (ties: the lowest id)
  std::vector<std::pair<int32_t, double>> top;  // the top_k most likely: (id, log p), most likely first
};

// log_softmax(logits [vocab]) at `token` and its top_k alternatives. The exponentials are f32 (relative
// error under 2 ulp) summed in double, so a log-probability is within 3e-7 of the exact one.
TokenLogprobs token_logprobs(const float* logits, int64_t vocab, int32_t token, int64_t top_k);

}  // namespace zaya
