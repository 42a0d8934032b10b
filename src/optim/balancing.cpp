#include "optim/balancing.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace zaya {

BalancingMode parse_balancing_mode(std::string_view name) {
  if (name == "adam") return BalancingMode::Adam;
  if (name == "sign") return BalancingMode::Sign;
  if (name == "off") return BalancingMode::Off;
  throw Error("expected \"adam\", \"sign\" or \"off\", got \"" + std::string(name) + "\"");
}

SkipPolicy parse_skip_policy(std::string_view name) {
  if (name == "free") return SkipPolicy::Free;
  if (name == "target") return SkipPolicy::Target;
  throw Error("expected \"free\" or \"target\", got \"" + std::string(name) + "\"");
}

BalancingController::BalancingController(const BalancingConfig& config, int64_t layers, int64_t experts)
    : config_(config),
      layers_(layers),
      experts_(experts),
      m_(size_t(layers * (experts + 1)), 0.0f),
      v_(size_t(layers * (experts + 1)), 0.0f) {}

std::vector<double> BalancingController::targets(const std::vector<int64_t>& counts) const {
  const int64_t routes = experts_ + 1;
  int64_t total = 0;
  for (int64_t count : counts) total += count;
  std::vector<double> out(size_t(routes), 0.0);
  const double skip_share = config_.skip == SkipPolicy::Free
                                ? (total ? double(counts[size_t(experts_)]) / double(total) : 0.0)
                                : double(config_.skip_target);
  for (int64_t e = 0; e < experts_; ++e) out[size_t(e)] = (1.0 - skip_share) / double(experts_);
  out[size_t(experts_)] = skip_share;
  return out;
}

void BalancingController::update(const std::vector<std::vector<int64_t>>& counts,
                                 const std::vector<float*>& biases) {
  if (config_.mode == BalancingMode::Off) return;
  ++steps_;
  const int64_t routes = experts_ + 1;
  const float correction1 = 1.0f - std::pow(config_.beta1, float(steps_));
  const float correction2 = 1.0f - std::pow(config_.beta2, float(steps_));
  for (int64_t layer = 0; layer < layers_; ++layer) {
    const std::vector<int64_t>& layer_counts = counts[size_t(layer)];
    int64_t total = 0;
    for (int64_t count : layer_counts) total += count;
    if (total == 0) continue;
    const std::vector<double> target = targets(layer_counts);
    // Under SkipPolicy::Free the skip bias is not the controller's to move.
    const int64_t steered = config_.skip == SkipPolicy::Free ? experts_ : routes;
    for (int64_t e = 0; e < steered; ++e) {
      const float error = float(double(layer_counts[size_t(e)]) / double(total) - target[size_t(e)]);
      float& bias = biases[size_t(layer)][e];
      if (config_.mode == BalancingMode::Sign) {
        bias -= config_.lr * float((error > 0) - (error < 0));
        continue;
      }
      float& m = m_[size_t(layer * routes + e)];
      float& v = v_[size_t(layer * routes + e)];
      m = config_.beta1 * m + (1.0f - config_.beta1) * error;
      v = config_.beta2 * v + (1.0f - config_.beta2) * error * error;
      bias -= config_.lr * (m / correction1) / (std::sqrt(v / correction2) + config_.eps);
    }
  }
}

}  // namespace zaya
