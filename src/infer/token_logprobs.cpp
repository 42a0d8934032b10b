#include "infer/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace zaya {

TokenLogprobs token_logprobs(const float* logits, int64_t vocab, int32_t token, int64_t top_k) {
  const int32_t best = int32_t(std::max_element(logits, logits + vocab) - logits);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - double(logits[best]));
  const double log_normaliser = double(logits[best]) + std::log(sum);
  TokenLogprobs out;
  out.token = double(logits[token]) - log_normaliser;
  out.greedy = token == best;
  const int64_t k = std::min(top_k, vocab);
  if (k <= 0) return out;
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  for (int64_t i = 0; i < k; ++i)
    out.top.emplace_back(order[size_t(i)], double(logits[order[size_t(i)]]) - log_normaliser);
  return out;
}

}  // namespace zaya
