#include "train/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/tensorboard.h"

namespace zaya {
namespace {

double max_over_mean(const std::vector<RoutingMetrics>& routing) {
  double worst = 0;
  for (const RoutingMetrics& layer : routing) worst = std::max(worst, layer.max_over_mean);
  return worst;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = int64_t(seconds + 0.5);
  char out[32];
  if (s >= 3600) {
    std::snprintf(out, sizeof out, "%lldh%02lldm", (long long)(s / 3600), (long long)(s / 60 % 60));
  } else if (s >= 60) {
    std::snprintf(out, sizeof out, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  } else {
    std::snprintf(out, sizeof out, "%llds", (long long)s);
  }
  return out;
}

MetricsLog::MetricsLog(const std::string& run_dir, bool tensorboard) {
  const std::string path = run_dir + "/metrics.jsonl";
  jsonl_ = std::fopen(path.c_str(), "a");
  if (!jsonl_) throw Error(cat("cannot open for appending: ", std::strerror(errno))).file(path);
  if (tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>(run_dir + "/tb");
}

MetricsLog::~MetricsLog() {
  if (jsonl_) std::fclose(jsonl_);
}

void MetricsLog::step(const StepMetrics& m) {
  nlohmann::json record = {{"type", "train"},
                           {"step", m.step},
                           {"tokens", m.tokens},
                           {"stage", m.stage_name},
                           {"loss", m.loss},
                           {"lr", m.lr},
                           {"grad_norm", m.grad_norm},
                           {"clip", m.clip},
                           {"tokens_per_second", m.tokens_per_second},
                           {"mfu", m.mfu},
                           {"step_seconds", m.step_seconds},
                           {"sequences", m.sequences},
                           {"seq_len", m.seq_len},
                           {"skipped", m.skipped}};
  if (m.aux_loss != 0) record["aux_loss"] = m.aux_loss;
  if (m.ranks > 1) {
    record["ranks"] = m.ranks;
    record["communication_seconds"] = m.communication_seconds;
    record["gradient_reduction_seconds"] = m.gradient_seconds;
    if (m.context_seconds > 0) record["context_exchange_seconds"] = m.context_seconds;
    record["communication_bytes"] = m.communication_bytes;
  }
  nlohmann::json routing = nlohmann::json::array();
  for (const RoutingMetrics& layer : m.routing) {
    routing.push_back({{"fractions", layer.fractions},
                       {"max_over_mean", layer.max_over_mean},
                       {"skip_share", layer.skip_share},
                       {"entropy", layer.entropy}});
  }
  record["routing"] = routing;
  std::fprintf(jsonl_, "%s\n", record.dump().c_str());
  if (!tensorboard_) return;
  tensorboard_->scalar("train/loss", m.step, m.loss);
  tensorboard_->scalar("train/lr", m.step, m.lr);
  tensorboard_->scalar("train/grad_norm", m.step, m.grad_norm);
  tensorboard_->scalar("train/tokens_per_second", m.step, m.tokens_per_second);
  tensorboard_->scalar("train/mfu", m.step, m.mfu);
  tensorboard_->scalar("train/tokens", m.step, double(m.tokens));
  if (m.aux_loss != 0) tensorboard_->scalar("train/aux_loss", m.step, m.aux_loss);
  tensorboard_->scalar("routing/max_over_mean", m.step, max_over_mean(m.routing));
  for (size_t l = 0; l < m.routing.size(); ++l) {
    const RoutingMetrics& layer = m.routing[l];
    const std::string prefix = "routing/layer_" + std::to_string(l) + "/";
    tensorboard_->scalar(prefix + "max_over_mean", m.step, layer.max_over_mean);
    tensorboard_->scalar(prefix + "skip_share", m.step, layer.skip_share);
    tensorboard_->scalar(prefix + "entropy", m.step, layer.entropy);
    std::vector<int64_t> per_mille;  // the routes' shares in thousandths: a bar per route, skip last
    for (double fraction : layer.fractions) per_mille.push_back(int64_t(std::lround(fraction * 1000)));
    tensorboard_->bars(prefix + "load", m.step, per_mille);
  }
}

void MetricsLog::eval(const EvalMetrics& m) {
  const nlohmann::json record = {{"type", "eval"},
                                 {"step", m.step},
                                 {"tokens", m.tokens},
                                 {"eval_tokens", m.eval_tokens},
                                 {"loss", m.loss},
                                 {"perplexity", m.perplexity},
                                 {"bits_per_byte", m.bits_per_byte}};
  std::fprintf(jsonl_, "%s\n", record.dump().c_str());
  if (!tensorboard_) return;
  tensorboard_->scalar("eval/loss", m.step, m.loss);
  tensorboard_->scalar("eval/perplexity", m.step, m.perplexity);
  tensorboard_->scalar("eval/bits_per_byte", m.step, m.bits_per_byte);
}

void MetricsLog::event(const std::string& type, int64_t step, const std::string& fields_json) {
  nlohmann::json record = nlohmann::json::parse(fields_json);
  record["type"] = type;
  record["step"] = step;
  std::fprintf(jsonl_, "%s\n", record.dump().c_str());
}

void MetricsLog::flush() {
  std::fflush(jsonl_);
  if (tensorboard_) tensorboard_->flush();
}

ConsoleProgress::ConsoleProgress(double seconds_between_lines, bool live)
    : terminal_(live && ::isatty(STDOUT_FILENO) == 1), period_(seconds_between_lines), last_line_() {}

void ConsoleProgress::step(const StepMetrics& m) {
  char line[512];
  std::snprintf(
      line, sizeof line,
      "stage %lld/%lld %s | step %lld | %.2fM/%.2fM tok | loss %.4f | lr %.2e | gnorm %.3f | %.0f tok/s | "
      "MFU %.1f%% | load %.2f | ETA %s%s",
      (long long)(m.stage + 1), (long long)m.stages, m.stage_name.c_str(), (long long)m.step,
      double(m.tokens) / 1e6, double(m.total_tokens) / 1e6, m.loss, m.lr, m.grad_norm, m.tokens_per_second,
      100 * m.mfu, max_over_mean(m.routing), format_duration(m.eta_seconds).c_str(),
      m.skipped ? " | SKIPPED (non-finite)" : "");
  if (terminal_) {
    std::printf("\r\033[K%s", line);
    std::fflush(stdout);
    live_ = true;
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (m.step > 1 && !m.skipped && std::chrono::duration<double>(now - last_line_).count() < period_) return;
  last_line_ = now;
  std::printf("%s\n", line);
  std::fflush(stdout);
}

void ConsoleProgress::print(const std::string& line) {
  finish();
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void ConsoleProgress::finish() {
  if (live_) std::printf("\n");
  live_ = false;
}

}  // namespace zaya
