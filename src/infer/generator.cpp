#include "infer/generator.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "core/thread_governor.h"
#include "dist/communicator.h"
#include "model/zaya_model.h"

namespace zaya {

int32_t sample_token(const float* logits, int64_t vocab, const SamplingRule& rule, double draw) {
  if (rule.temperature <= 0 || rule.top_k == 1)
    return int32_t(std::max_element(logits, logits + vocab) - logits);
  const double max = *std::max_element(logits, logits + vocab);
  std::vector<double> probs(static_cast<size_t>(vocab));
  double total = 0;
  for (int64_t i = 0; i < vocab; ++i)
    total += probs[size_t(i)] = std::exp((double(logits[i]) - max) / rule.temperature);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  // Most likely first, ties by id: the nucleus is the shortest prefix holding top_p of the mass, and at
  // most top_k long. Only that prefix needs sorting.
  const size_t candidates = rule.top_k > 0 ? size_t(std::min(rule.top_k, vocab)) : order.size();
  std::partial_sort(
      order.begin(), order.begin() + std::ptrdiff_t(candidates), order.end(), [&](int32_t a, int32_t b) {
        return probs[size_t(a)] != probs[size_t(b)] ? probs[size_t(a)] > probs[size_t(b)] : a < b;
      });
  double kept = 0;
  size_t nucleus = 0;
  while (nucleus < candidates && (nucleus == 0 || kept < rule.top_p * total))
    kept += probs[size_t(order[nucleus++])];
  double target = draw * kept;
  for (size_t i = 0; i < nucleus; ++i) {
    target -= probs[size_t(order[i])];
    if (target < 0) return order[i];
  }
  return order[nucleus - 1];
}

namespace {

void require_prompt(const std::vector<int32_t>& prompt) {
  if (prompt.empty()) throw Error("the prompt encodes to no tokens; give some text").field("prompt");
}

}  // namespace

std::vector<int32_t> generate(ZayaModel& model, const std::vector<int32_t>& prompt,
                              const SamplingOptions& options, const std::function<void(int32_t)>& on_token) {
  require_prompt(prompt);
  const ModelDims& dims = model.params().dims();
  DecodeCache cache = make_decode_cache(dims, int64_t(prompt.size()) + options.max_new_tokens);
  // The prompt in one pass (its weights read once, not once per token), only its last logits computed.
  const float* logits =
      model.prefill(prompt.data(), int64_t(prompt.size()), cache, ZayaModel::PrefillLogits::Last);
  const RandomStream rng(options.seed, RngPurpose::Sampling, 0);
  ThreadGovernor governor;  // decoding shares its machine, as training does
  std::vector<int32_t> out;
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const int32_t next = sample_token(logits, dims.vocab, options, rng.uniform_double(uint64_t(i)));
    out.push_back(next);
    if (on_token) on_token(next);
    if (options.stop_token && next == *options.stop_token) break;
    if (i + 1 < options.max_new_tokens) logits = model.decode_step(next, cache);
    governor.after_step();
  }
  return out;
}

std::vector<int32_t> generate_in_expert_group(ZayaModel& model, const std::vector<int32_t>& prompt,
                                              const SamplingOptions& options, Communicator& group) {
  require_prompt(prompt);
  const int64_t vocab = model.params().dims().vocab;
  const RandomStream rng(options.seed, RngPurpose::Sampling, 0);
  std::vector<int32_t> text = prompt, out;
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const ForwardResult result =
        model.forward({text.data(), nullptr, nullptr, 1, int64_t(text.size())}, true);
    const float* last = result.logits + (int64_t(text.size()) - 1) * vocab;
    int32_t next = sample_token(last, vocab, options, rng.uniform_double(uint64_t(i)));
    group.broadcast(&next, sizeof next, 0);
    out.push_back(next);
    text.push_back(next);
    if (options.stop_token && next == *options.stop_token) break;
  }
  return out;
}

}  // namespace zaya
