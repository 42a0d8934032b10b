#pragma once
// Log-probabilities from a row of logits: what a scoring request asks of each position (the given token's,
// and the most likely alternatives).

#include <cstdint>
#include <utility>
#include <vector>

namespace zaya {

struct TokenLogprobs {
  double token = 0;                             // log p(token)
  bool greedy = false;                          // the token is the most likely one (ties: the lowest id)
  std::vector<std::pair<int32_t, double>> top;  // the top_k most likely: (id, log p), most likely first
};

// log_softmax(logits [vocab]) at `token`, in double precision, and its top_k alternatives.
TokenLogprobs token_logprobs(const float* logits, int64_t vocab, int32_t token, int64_t top_k);

}  // namespace zaya
