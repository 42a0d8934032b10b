#pragma once
// The router's load balancing without an auxiliary loss: one bias per route and layer (a buffer, added to
// the probabilities for the top-1 choice only) moved once per optimizer step from the routing fractions of
// the whole global batch. `adam` feeds (fraction - target) to Adam as the biases' gradient (Zyphra's
// controller: an overloaded expert's bias goes down); `sign` is DeepSeek-V3's b -= rate * sign(fraction -
// target); `off` freezes them.

#include <cstdint>
#include <string_view>
#include <vector>

namespace zaya {

enum class BalancingMode { Adam, Sign, Off };

// What the skip route's share is measured against.
enum class SkipPolicy {
  Free,    // the skip bias is left alone; experts are balanced among the tokens that do not skip
  Target,  // the skip route is steered to skip_target; experts share the rest equally
};

struct BalancingConfig {
  BalancingMode mode = BalancingMode::Adam;
  float lr = 1e-3f;  // Adam's learning rate, or the sign update's step
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  SkipPolicy skip = SkipPolicy::Free;
  float skip_target = 0.0f;  // with SkipPolicy::Target
};

BalancingMode parse_balancing_mode(std::string_view name);  // "adam", "sign", "off"
SkipPolicy parse_skip_policy(std::string_view name);        // "free", "target"

class BalancingController {
 public:
  BalancingController(const BalancingConfig& config, int64_t layers, int64_t experts);

  // counts: per layer, tokens per route over the global batch (routes = experts + 1, skip last).
  // biases: per layer, the balancing_biases buffer to update in place.
  void update(const std::vector<std::vector<int64_t>>& counts, const std::vector<float*>& biases);

  // The targets for one layer's counts (routes entries).
  std::vector<double> targets(const std::vector<int64_t>& counts) const;

  // Adam's moments and step count, for checkpoints: [layers * routes] each.
  std::vector<float>& first_moment() { return m_; }
  std::vector<float>& second_moment() { return v_; }
  int64_t& steps() { return steps_; }

 private:
  BalancingConfig config_;
  int64_t layers_, experts_;
  std::vector<float> m_, v_;
  int64_t steps_ = 0;
};

}  // namespace zaya
