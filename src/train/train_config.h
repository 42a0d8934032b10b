#pragma once
// The run's TOML configuration: every constant of training, with the defaults documented in
// docs/CONFIG.md. Unknown keys and bad values are errors naming the file, line and key.

#include <string>
#include <string_view>
#include <vector>

#include "model/zaya_model.h"
#include "optim/balancing.h"
#include "optim/batch_ramp.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"

namespace zaya {

struct TrainConfig {
  std::string source;  // the file it came from
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  BalancingConfig balancing;
  RouterAuxLoss aux_loss;
  BatchRampConfig batch;
};

// overrides: "section.key=value", value in TOML syntax (a bare word is taken as a string); applied before
// validation, so they are checked like the file's own values.
TrainConfig parse_train_config(std::string_view text, const std::string& source,
                               const std::vector<std::string>& overrides = {});
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides = {});

}  // namespace zaya
