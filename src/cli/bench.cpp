// `zaya bench step`: forward+backward tokens/s and MFU against the GEMM throughput (sgemm, or bf16 in a bf16
// run) measured in the same run on the same machine.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "backend/ops.h"
#include "backend/precision_policy.h"
#include "backend/throughput.h"
#include "cli/commands.h"
#include "cli/model_source.h"
#include "cli/validators.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/thread_governor.h"
#include "core/threads.h"
#include "model/model_io.h"
#include "model/model_stats.h"
#include "model/zaya_model.h"
#include "optim/optimizer.h"

namespace zaya::cli {
namespace {

struct StepArgs {
  ModelSource source;
  int64_t batch = 16, seq = 512;
  int steps = 5;
  std::string precision = "auto";
  bool json = false;
};

// batch x seq, at most 2^31 tokens a step (more would not fit in memory, and its sizes overflow).
int64_t step_tokens(int64_t batch, int64_t seq) {
  constexpr int64_t kMost = int64_t(1) << 31;
  if (batch > kMost / seq)
    throw Error(cat("--batch ", batch, " x --seq ", seq, " is more than ", kMost, " tokens a step"))
        .field("--batch");
  return batch * seq;
}

double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + long(values.size() / 2), values.end());
  return values[values.size() / 2];
}

void run_step_bench(const StepArgs& args) {
  LoadedModel model;
  if (!args.source.model_dir.empty()) {
    model = load_model(args.source.model_dir);
  } else {
    model.config = args.source.config();
    model.params = std::make_unique<ParameterStore>(model_dims(model.config));
    init_parameters(*model.params, model.config.initializer_range, 0);
  }
  const ModelDims& dims = model.params->dims();
  const int64_t tokens = step_tokens(args.batch, args.seq);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  const RandomStream rng(0, RngPurpose::Test, 0);
  for (int64_t t = 0; t < tokens; ++t) ids[size_t(t)] = int32_t(rng.bits(uint64_t(t)) % uint32_t(dims.vocab));
  const std::vector<int32_t> labels = shifted_labels(ids.data(), args.batch, args.seq);
  const Batch batch{ids.data(), labels.data(), nullptr, args.batch, args.seq};

  Ops& ops = cpu_ops();
  const Precision precision = resolve_precision(args.precision, ops, "--precision");
  const double gemm_flops = measure_gemm_flops(ops, precision);
  ZayaModel zaya(*model.params, ops, precision);
  ThreadGovernor governor;  // as in training: fewer threads while another process holds a core
  std::vector<double> seconds;
  for (int step = 0; step <= args.steps; ++step) {
    model.params->zero_grads();
    const auto start = std::chrono::steady_clock::now();
    zaya.forward_backward(batch, 1.0f / float(tokens));
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    if (step > 0) seconds.push_back(elapsed.count());  // step 0 sizes the arenas
    governor.after_step();
  }
  const double step_seconds = median(seconds);
  const ModelStats stats = model_stats(model.params->table(), dims, args.seq);
  const double tokens_per_second = double(tokens) / step_seconds;
  const double model_flops = stats.training_flops_per_token * tokens_per_second;
  const double mfu = model_flops / gemm_flops;
  if (args.json) {
    const nlohmann::json out = {{"source", args.source.describe()},
                                {"batch", args.batch},
                                {"seq", args.seq},
                                {"threads", num_threads()},
                                {"precision", precision_name(precision)},
                                {"steps", args.steps},
                                {"step_seconds", step_seconds},
                                {"tokens_per_second", tokens_per_second},
                                {"model_flops", model_flops},
                                {"gemm_flops", gemm_flops},
                                {"mfu", mfu}};
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("%s: batch %lld x %lld = %lld tokens, %d threads, %s\n", args.source.describe().c_str(),
              (long long)args.batch, (long long)args.seq, (long long)tokens, num_threads(),
              describe_precision(args.precision, precision).c_str());
  std::printf("%s 1024^3: %.1f GFLOP/s (fastest of 15)\n",
              precision == Precision::BF16 ? "bf16 GEMM" : "sgemm", gemm_flops / 1e9);
  std::printf(
      "forward+backward: %.3f s/step (median of %d), %.0f tokens/s, %.1f GFLOP/s of model FLOPs, MFU "
      "%.1f%%\n",
      step_seconds, args.steps, tokens_per_second, model_flops / 1e9, 100 * mfu);
}

struct OptimizerArgs {
  ModelSource source;
  int64_t layers = 0;  // 0: all of the model's
  int64_t batch = 16, seq = 512;
  int steps = 3;
  std::string precision = "auto";
};

// The optimizer's step time next to the forward+backward time of one batch, on real gradients.
void run_optimizer_bench(const OptimizerArgs& args) {
  ZayaConfig config = args.source.config();
  if (args.layers > 0 && args.layers < config.num_hidden_layers) {
    config.num_hidden_layers = args.layers;
    config.layer_types.resize(size_t(args.layers));
  }
  ParameterStore params(model_dims(config));
  init_parameters(params, config.initializer_range, 0);
  const ModelDims& dims = params.dims();
  const int64_t tokens = step_tokens(args.batch, args.seq);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  const RandomStream rng(0, RngPurpose::Test, 0);
  for (int64_t t = 0; t < tokens; ++t) ids[size_t(t)] = int32_t(rng.bits(uint64_t(t)) % uint32_t(dims.vocab));
  const std::vector<int32_t> labels = shifted_labels(ids.data(), args.batch, args.seq);

  Ops& ops = cpu_ops();
  const Precision precision = resolve_precision(args.precision, ops, "--precision");
  ZayaModel model(params, ops, precision);
  Optimizer optimizer(params, {}, ops, {}, precision);
  std::vector<double> forward_backward, step, muon, adamw;
  for (int i = 0; i <= args.steps; ++i) {
    params.zero_grads();
    const auto start = std::chrono::steady_clock::now();
    model.forward_backward({ids.data(), labels.data(), nullptr, args.batch, args.seq}, 1.0f / float(tokens));
    const auto middle = std::chrono::steady_clock::now();
    const OptimizerStepStats stats = optimizer.step(1.0);
    model.weights_changed();  // the bf16 copies are part of a step's update
    const auto end = std::chrono::steady_clock::now();
    if (i == 0) continue;  // warm-up
    forward_backward.push_back(std::chrono::duration<double>(middle - start).count());
    step.push_back(std::chrono::duration<double>(end - middle).count());
    muon.push_back(stats.muon_seconds);
    adamw.push_back(stats.adamw_seconds);
  }
  int64_t muon_params = 0, adamw_params = 0;
  for (const ParamAssignment& a : optimizer.assignments()) {
    (a.optimizer == OptimizerKind::Muon ? muon_params : adamw_params) += a.param->numel();
  }
  const double fb = median(forward_backward), opt = median(step);
  std::printf("%s, %lld layers: %.3g M parameters (Muon %.3g M, AdamW %.3g M), %d threads, precision %s\n",
              args.source.describe().c_str(), (long long)dims.layers,
              double(muon_params + adamw_params) / 1e6, double(muon_params) / 1e6, double(adamw_params) / 1e6,
              num_threads(), std::string(precision_name(precision)).c_str());
  std::printf(
      "forward+backward of %lld tokens: %.3f s; optimizer step: %.3f s (Muon %.3f s, AdamW %.3f s), medians "
      "of %d\n",
      (long long)tokens, fb, opt, median(muon), median(adamw), args.steps);
  std::printf("optimizer / forward+backward = %.3f at %lld tokens per step\n", opt / fb, (long long)tokens);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "measure speed");
  bench->require_subcommand(1);
  auto args = std::make_shared<StepArgs>();
  CLI::App* step = bench->add_subcommand("step", "forward+backward tokens/s and MFU of a model");
  args->source.add_options(*step, true, true);
  step->add_option("--batch", args->batch, "sequences per step")->check(positive());
  step->add_option("--seq", args->seq, "tokens per sequence")->check(positive());
  step->add_option("--steps", args->steps, "timed steps (after one warm-up)")->check(positive());
  step->add_option("--precision", args->precision,
                   "of the products: auto (bf16 where the CPU has it), fp32, bf16")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}));
  step->add_flag("--json", args->json, "print one JSON line");
  step->callback([args] { run_step_bench(*args); });

  auto opt_args = std::make_shared<OptimizerArgs>();
  CLI::App* optimizer =
      bench->add_subcommand("optimizer", "the optimizer step's time against forward+backward");
  opt_args->source.add_options(*optimizer, true, true);
  optimizer->add_option("--layers", opt_args->layers, "keep only the first N layers (0: all)")
      ->check(non_negative());
  optimizer->add_option("--batch", opt_args->batch, "sequences per step")->check(positive());
  optimizer->add_option("--seq", opt_args->seq, "tokens per sequence")->check(positive());
  optimizer->add_option("--steps", opt_args->steps, "timed steps (after one warm-up)")->check(positive());
  optimizer->add_option("--precision", opt_args->precision, "of the products: auto, fp32, bf16")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}));
  optimizer->callback([opt_args] { run_optimizer_bench(*opt_args); });
}

}  // namespace zaya::cli
