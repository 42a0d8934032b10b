#pragma once
// Learning-rate schedules as a multiplier of the base rate, over tokens (so that a growing batch does not
// stretch or squeeze them): linear warmup, then constant, cosine, or warmup-stable-decay.

#include <cstdint>
#include <string_view>

namespace zaya {

enum class ScheduleKind { Constant, Cosine, Wsd };
enum class DecayShape { Linear, Cosine, Sqrt };  // Sqrt: 1 - sqrt(progress), common in WSD runs

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::Wsd;
  int64_t warmup_tokens = 0;
  double decay_fraction = 0.2;  // WSD: the last part of the run that decays
  DecayShape decay_shape = DecayShape::Linear;
  double min_lr_ratio = 0.0;  // where cosine and WSD end, as a fraction of the base rate
};

// The multiplier for the update made after `tokens` tokens have been consumed (this step's included), in a
// run of total_tokens.
double lr_multiplier(const ScheduleConfig& config, int64_t tokens, int64_t total_tokens);

ScheduleKind parse_schedule_kind(std::string_view name);  // "constant", "cosine", "wsd"; throws Error
DecayShape parse_decay_shape(std::string_view name);      // "linear", "cosine", "sqrt"; throws Error

}  // namespace zaya
