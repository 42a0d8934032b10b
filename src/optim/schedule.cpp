#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "core/error.h"

namespace zaya {

double lr_multiplier(const ScheduleConfig& c, int64_t tokens, int64_t total_tokens) {
  if (c.warmup_tokens > 0 && tokens < c.warmup_tokens) return double(tokens) / double(c.warmup_tokens);
  auto shaped = [&](double progress, DecayShape shape) {
    progress = std::clamp(progress, 0.0, 1.0);
    double remaining = 1.0 - progress;
    if (shape == DecayShape::Cosine) remaining = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    if (shape == DecayShape::Sqrt) remaining = 1.0 - std::sqrt(progress);
    return c.min_lr_ratio + (1.0 - c.min_lr_ratio) * remaining;
  };
  switch (c.kind) {
    case ScheduleKind::Constant:
      return 1.0;
    case ScheduleKind::Cosine: {
      const double span = double(std::max<int64_t>(1, total_tokens - c.warmup_tokens));
      return shaped(double(tokens - c.warmup_tokens) / span, DecayShape::Cosine);
    }
    case ScheduleKind::Wsd: {
      const double decay_start = double(total_tokens) * (1.0 - c.decay_fraction);
      if (double(tokens) <= decay_start) return 1.0;
      const double span = std::max(1.0, double(total_tokens) - decay_start);
      return shaped((double(tokens) - decay_start) / span, c.decay_shape);
    }
  }
  return 1.0;
}

ScheduleKind parse_schedule_kind(std::string_view name) {
  if (name == "constant") return ScheduleKind::Constant;
  if (name == "cosine") return ScheduleKind::Cosine;
  if (name == "wsd") return ScheduleKind::Wsd;
  throw Error("expected \"constant\", \"cosine\" or \"wsd\", got \"" + std::string(name) + "\"");
}

DecayShape parse_decay_shape(std::string_view name) {
  if (name == "linear") return DecayShape::Linear;
  if (name == "cosine") return DecayShape::Cosine;
  if (name == "sqrt") return DecayShape::Sqrt;
  throw Error("expected \"linear\", \"cosine\" or \"sqrt\", got \"" + std::string(name) + "\"");
}

}  // namespace zaya
