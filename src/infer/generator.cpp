#include "infer/generator.h"

#include <algorithm>
#include <unordered_map>

#include "backend/ops.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/thread_governor.h"
#include "core/vec_math.h"
#include "dist/communicator.h"
#include "infer/token_logprobs.h"
#include "model/zaya_model.h"

namespace zaya {

namespace {

// Tokens are drawn most likely first (ranks_before), so a nucleus is a prefix of that ranking.
// Sorting the vocabulary for it took 4.4 ms per token at 32768 (as long as a decode step); instead tokens
// are binned by logit, kBinsPerNat bins per unit of (max - z): bins come in rank order, and a walk through
// them sorts only the bins it stops in. Logits more than kBins / kBinsPerNat = 64 below the largest (weights
// under e^(-64 / T) of its), and NaNs, share the last bin.
constexpr int kBins = 1024;
constexpr float kBinsPerNat = 16;

class RankedLogits {
 public:
  RankedLogits(const float* logits, int64_t vocab, double temperature)
      : logits_(logits), vocab_(vocab), max_(row_max(logits, vocab)) {
    weights_.resize(size_t(vocab));  // exp((z - max) / T) in f32, 0 for a NaN logit
    bin_of_.resize(size_t(vocab));
    bins_.assign(kBins, {});
    const float inv_t = float(1.0 / temperature);
    for (int64_t i = 0; i < vocab; i += 8) {
      const int64_t n = std::min<int64_t>(8, vocab - i);
      const Float8 z = load_partial(logits + i, n, 0.0f), weight = vexp((z - max_) * inv_t);
      store_partial(weights_.data() + i, weight == weight ? weight : Float8{}, n);
      const Float8 position = (max_ - z) * kBinsPerNat;  // NaN for a NaN logit
      const Float8 last = splat(float(kBins - 1));
      const Int8 bin = __builtin_convertvector(position < last ? position : last, Int8);
      for (int64_t j = 0; j < n; ++j) bin_of_[size_t(i + j)] = uint16_t(bin[j]);
    }
    for (int64_t i = 0; i < vocab; ++i) {
      Bin& bin = bins_[bin_of_[size_t(i)]];
      bin.mass += weights_[size_t(i)];
      ++bin.count;
    }
    for (const Bin& bin : bins_) total_ += bin.mass;
  }

  double total() const { return total_; }
  double weight(int32_t id) const { return weights_[size_t(id)]; }
  int64_t count(int bin) const { return bins_[size_t(bin)].count; }
  double mass(int bin) const { return bins_[size_t(bin)].mass; }

  // The bin's ids in rank order (sorted once, on first use).
  const std::vector<int32_t>& members(int bin) {
    std::vector<int32_t>& ids = sorted_[bin];
    if (!ids.empty() || count(bin) == 0) return ids;
    for (int64_t i = 0; i < vocab_; ++i) {
      if (bin_of_[size_t(i)] == bin) ids.push_back(int32_t(i));
    }
    std::sort(ids.begin(), ids.end(), [this](int32_t a, int32_t b) { return ranks_before(logits_, a, b); });
    return ids;
  }

 private:
  struct Bin {
    double mass = 0;
    int64_t count = 0;
  };
  const float* logits_;
  int64_t vocab_;
  float max_;
  std::vector<float> weights_;    // [vocab]
  std::vector<uint16_t> bin_of_;  // [vocab]
  std::vector<Bin> bins_;         // [kBins]
  double total_ = 0;
  std::unordered_map<int, std::vector<int32_t>> sorted_;
};

}  // namespace

int32_t sample_token(const float* logits, int64_t vocab, const SamplingRule& rule, double draw) {
  if (rule.temperature <= 0 || rule.top_k == 1) return most_likely_token(logits, vocab);
  RankedLogits ranked(logits, vocab, rule.temperature);
  if (!(ranked.total() > 0)) return most_likely_token(logits, vocab);  // no finite weight: the logits broke
  // The nucleus: the shortest prefix of the ranking whose weight reaches top_p of the total, at most top_k
  // long; it ends after `last_count` tokens of bin `last_bin`.
  const int64_t candidates = rule.top_k > 0 ? std::min(rule.top_k, vocab) : vocab;
  const double wanted = rule.top_p * ranked.total();
  int64_t taken = 0;
  double kept = 0;
  int last_bin = 0;
  int64_t last_count = 0;
  auto open = [&] { return taken < candidates && (taken == 0 || kept < wanted); };
  for (int bin = 0; bin < kBins && open(); ++bin) {
    if (ranked.count(bin) == 0) continue;
    last_bin = bin, last_count = 0;
    if (taken + ranked.count(bin) <= candidates && kept + ranked.mass(bin) < wanted) {
      taken += ranked.count(bin), kept += ranked.mass(bin), last_count = ranked.count(bin);
      continue;
    }
    for (int32_t id : ranked.members(bin)) {
      if (!open()) break;
      ++taken, kept += ranked.weight(id), ++last_count;
    }
  }
  // The draw's token: where the running weight of the nucleus passes draw * kept.
  double target = draw * kept;
  for (int bin = 0; bin <= last_bin; ++bin) {
    const int64_t inside = bin == last_bin ? last_count : ranked.count(bin);
    if (inside == 0) continue;
    if (inside == ranked.count(bin) && target - ranked.mass(bin) >= 0) {
      target -= ranked.mass(bin);
      continue;
    }
    const std::vector<int32_t>& ids = ranked.members(bin);
    for (int64_t j = 0; j < inside; ++j) {
      target -= ranked.weight(ids[size_t(j)]);
      if (target < 0) return ids[size_t(j)];
    }
  }
  return ranked.members(last_bin)[size_t(last_count - 1)];  // rounding left the draw past the last token
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
  DecodeCache cache =
      make_decode_cache(dims, int64_t(prompt.size()) + options.max_new_tokens, model.ops().memory());
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
  std::vector<float> last(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < options.max_new_tokens; ++i) {
    const ForwardResult result =
        model.forward({text.data(), nullptr, nullptr, 1, int64_t(text.size())}, true);
    // The last position's logits, read from the backend's memory.
    model.ops().read_to_host(last.data(), result.logits + (int64_t(text.size()) - 1) * vocab,
                             last.size() * sizeof(float));
    int32_t next = sample_token(last.data(), vocab, options, rng.uniform_double(uint64_t(i)));
    group.broadcast(&next, sizeof next, 0);
    out.push_back(next);
    text.push_back(next);
    if (options.stop_token && next == *options.stop_token) break;
  }
  return out;
}

}  // namespace zaya
