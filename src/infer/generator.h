#pragma once
// Text generation on the model's incremental decoder: the prompt is fed token by token into the decode
// state, then tokens are sampled one at a time (temperature and nucleus sampling, reproducible from a seed).
// Under expert parallelism, on full forward passes instead.

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace zaya {

class Communicator;
class ZayaModel;

// How the next token is drawn from the logits.
struct SamplingRule {
  double temperature = 0.8;  // 0: always the most likely token
  double top_p = 0.95;       // sample from the smallest set of tokens whose probability reaches top_p
  int64_t top_k = 0;         // and from at most the top_k most likely (0: no limit)
};

struct SamplingOptions : SamplingRule {
  int64_t max_new_tokens = 64;
  uint64_t seed = 0;
  std::optional<int32_t> stop_token;  // end generation after producing it
};

// The next token from logits [vocab]; `draw` is a uniform number in [0, 1).
int32_t sample_token(const float* logits, int64_t vocab, const SamplingRule& rule, double draw);

// New token ids after the prompt; on_token sees each as it is produced (for streaming).
std::vector<int32_t> generate(ZayaModel& model, const std::vector<int32_t>& prompt,
                              const SamplingOptions& options,
                              const std::function<void(int32_t)>& on_token = {});

// The same, with the experts spread over an expert-parallel group (every rank of the group calls it alike,
// model.set_expert_group done): each token comes from a full forward pass over the text so far, as the
// incremental decoder needs every expert on one rank, and group rank 0's choice is broadcast so that the
// ranks stay in step. For short samples during training; the tokens equal generate()'s.
std::vector<int32_t> generate_in_expert_group(ZayaModel& model, const std::vector<int32_t>& prompt,
                                              const SamplingOptions& options, Communicator& group);

}  // namespace zaya
