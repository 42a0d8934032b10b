// `zaya bench step`: forward+backward tokens/s and MFU against the GEMM throughput (sgemm, or bf16 in a bf16
// run) measured in the same run on the same machine. `zaya bench optimizer`: the optimizer step against
// forward+backward. `zaya bench ops`: every backend op on a device against the CPU, its error and speed.
// `zaya bench decode`: the decode engine's tokens/s for one sequence and for a batch, without a server.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "backend/devices.h"
#include "backend/op_check.h"
#include "backend/op_profiler.h"
#include "backend/ops.h"
#include "backend/precision_policy.h"
#include "backend/throughput.h"
#include "cli/commands.h"
#include "cli/device_option.h"
#include "cli/model_source.h"
#include "cli/validators.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/thread_governor.h"
#include "core/threads.h"
#include "infer/token_logprobs.h"
#include "model/decode_cache.h"
#include "model/model_dims.h"
#include "model/model_io.h"
#include "model/model_stats.h"
#include "model/zaya_model.h"
#include "optim/optimizer.h"

namespace zaya::cli {
namespace {

// Untimed steps before the timed ones: the first sizes the model's arenas, the second is the first to touch
// their final memory (medium: 1.4 GB of page faults, that step 25% slower than the ones after it).
constexpr int kWarmUpSteps = 2;

struct StepArgs {
  ModelSource source;
  int64_t layers = 0;  // 0: all of the model's
  int64_t batch = 16, seq = 512;
  int steps = 5;
  std::string precision = "auto";
  std::string device = "auto";
  double peak_tflops = 0;  // the device's bf16 (or f32) peak from its data sheet; 0: not given
  bool json = false;
  bool profile = false;
};

// The first `layers` layers of a model config (0 or more than it has: all of them).
void keep_layers(ZayaConfig& config, int64_t layers) {
  if (layers > 0 && layers < config.num_hidden_layers) {
    config.num_hidden_layers = layers;
    config.layer_types.resize(size_t(layers));
  }
}

// The model a benchmark runs: a model directory's, or a preset or config randomly initialised (seed 0) with
// its first `layers` layers (0: all).
LoadedModel bench_model(const ModelSource& source, int64_t layers) {
  LoadedModel model;
  if (!source.model_dir.empty()) {
    if (layers > 0) throw Error("--layers applies to a preset or a config, not a model").field("--layers");
    return load_model(source.model_dir);
  }
  model.config = source.config();
  keep_layers(model.config, layers);
  model.params = std::make_unique<ParameterStore>(model_dims(model.config));
  init_parameters(*model.params, model.config.initializer_range, 0);
  return model;
}

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

// More steps through an OpProfiler, the last profiled: each op's time, and the host's between them.
struct StepProfile {
  double step_seconds = 0;
  std::vector<OpTime> rows;  // the slowest first
  double outside_ops() const {
    double in_ops = 0;
    for (const OpTime& row : rows) in_ops += row.seconds;
    return step_seconds - in_ops;
  }
};

// A model of its own beside the bench's (its activations are held twice meanwhile).
StepProfile profile_step(ParameterStore& params, Ops& ops, Precision precision, const Batch& batch,
                         float loss_scale) {
  OpProfiler profiler(ops);
  ZayaModel zaya(params, profiler.ops(), precision);
  // The first step grows this model's arenas, the second folds them into one block: the third is a step like
  // every later one.
  for (int warm_up = 0; warm_up < kWarmUpSteps; ++warm_up) zaya.forward_backward(batch, loss_scale);
  profiler.clear();
  params.zero_grads();
  ops.synchronize();
  const auto start = std::chrono::steady_clock::now();
  zaya.forward_backward(batch, loss_scale);
  ops.synchronize();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return {elapsed.count(), profiler.times()};
}

nlohmann::json profile_json(const StepProfile& profile) {
  nlohmann::json out = {{"step_seconds", profile.step_seconds},
                        {"outside_ops_seconds", profile.outside_ops()}};
  for (const OpTime& row : profile.rows) {
    out["ops"].push_back(
        {{"op", row.name}, {"calls", row.calls}, {"seconds", row.seconds}, {"flops", row.flops}});
  }
  return out;
}

// The first 30 rows, then the rest together.
void print_profile(const StepProfile& profile) {
  const double step = profile.step_seconds;
  double product_seconds = 0, product_flops = 0;
  for (const OpTime& row : profile.rows) {
    if (row.flops > 0) product_seconds += row.seconds, product_flops += row.flops;
  }
  std::printf(
      "profiled step (a wait for the device around each op): %.3f s; products %.3f s at %.1f TFLOP/s\n", step,
      product_seconds, product_seconds > 0 ? product_flops / product_seconds / 1e12 : 0.0);
  std::printf("%-48s %7s %10s %6s %9s\n", "op", "calls", "ms", "share", "TFLOP/s");
  constexpr size_t kShown = 30;
  double rest = 0;
  int64_t rest_calls = 0;
  for (size_t i = 0; i < profile.rows.size(); ++i) {
    const OpTime& row = profile.rows[i];
    if (i >= kShown) {
      rest += row.seconds, rest_calls += row.calls;
      continue;
    }
    std::printf("%-48s %7lld %10.3f %5.1f%%", row.name.c_str(), (long long)row.calls, 1e3 * row.seconds,
                100 * row.seconds / step);
    if (row.flops > 0) std::printf(" %9.1f", row.flops / row.seconds / 1e12);
    std::printf("\n");
  }
  if (profile.rows.size() > kShown) {
    std::printf("%-48s %7lld %10.3f %5.1f%%\n", cat(profile.rows.size() - kShown, " more rows").c_str(),
                (long long)rest_calls, 1e3 * rest, 100 * rest / step);
  }
  std::printf("%-48s %7s %10.3f %5.1f%%\n", "outside the ops (the host)", "", 1e3 * profile.outside_ops(),
              100 * profile.outside_ops() / step);
}

void run_step_bench(const StepArgs& args) {
  const Device device = select_device(args.device, "--device");  // before building a large model
  Ops& ops = *device.ops;
  LoadedModel model = bench_model(args.source, args.layers);
  const ModelDims& dims = model.params->dims();
  const int64_t tokens = step_tokens(args.batch, args.seq);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  const RandomStream rng(0, RngPurpose::Test, 0);
  for (int64_t t = 0; t < tokens; ++t) ids[size_t(t)] = int32_t(rng.bits(uint64_t(t)) % uint32_t(dims.vocab));
  const std::vector<int32_t> labels = shifted_labels(ids.data(), args.batch, args.seq);
  const Batch batch{ids.data(), labels.data(), nullptr, args.batch, args.seq};

  const PrecisionChoice choice =
      resolve_precision(args.precision, device, dominant_products(dims, tokens), "--precision");
  const Precision precision = choice.precision;
  GemmRate gemm = gemm_rate(ops, precision, num_threads());
  std::unique_ptr<ParameterStore> placed =
      device.on_host() ? nullptr : place_parameters(*model.params, ops.memory());
  ParameterStore& params = placed ? *placed : *model.params;
  ZayaModel zaya(params, ops, precision);
  ThreadGovernor governor;  // as in training: fewer threads while another process holds a core
  std::vector<double> seconds;
  int64_t host_reads = 0;  // of the last step: each one a wait for the device
  for (int step = 0; step < kWarmUpSteps + args.steps; ++step) {
    params.zero_grads();
    ops.synchronize();
    const int64_t reads_before = ops.host_reads();
    const auto start = std::chrono::steady_clock::now();
    zaya.forward_backward(batch, 1.0f / float(tokens));
    ops.synchronize();
    host_reads = ops.host_reads() - reads_before;
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    if (step >= kWarmUpSteps) seconds.push_back(elapsed.count());
    governor.after_step();
  }
  const double step_seconds = median(seconds);
  std::optional<StepProfile> profile;
  if (args.profile) profile = profile_step(params, ops, precision, batch, 1.0f / float(tokens));
  const ModelStats stats = model_stats(model.params->table(), dims, args.seq);
  const double tokens_per_second = double(tokens) / step_seconds;
  const double model_flops = stats.training_flops_per_token * tokens_per_second;
  const double mfu = gemm.mfu(model_flops);
  const double gemm_flops = gemm.flops();
  const double peak_mfu = args.peak_tflops > 0 ? model_flops / (args.peak_tflops * 1e12) : 0.0;
  if (args.json) {
    nlohmann::json out = {{"source", args.source.describe()},
                          {"device", device.description},
                          {"layers", dims.layers},
                          {"batch", args.batch},
                          {"seq", args.seq},
                          {"threads", num_threads()},
                          {"precision", precision_name(precision)},
                          {"steps", args.steps},
                          {"step_seconds", step_seconds},
                          {"tokens_per_second", tokens_per_second},
                          {"model_flops", model_flops},
                          {"gemm_flops", gemm_flops},
                          {"mfu", mfu},
                          {"host_reads", host_reads}};
    if (args.peak_tflops > 0) out["mfu_of_peak"] = peak_mfu;
    if (profile) out["profile"] = profile_json(*profile);
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("%s, %lld layers: batch %lld x %lld = %lld tokens on %s, %d threads, %s\n",
              args.source.describe().c_str(), (long long)dims.layers, (long long)args.batch,
              (long long)args.seq, (long long)tokens, device.description.c_str(), num_threads(),
              choice.description.c_str());
  std::printf("%s\n", gemm.describe().c_str());
  std::printf(
      "forward+backward: %.3f s/step (median of %d), %.0f tokens/s, %.1f GFLOP/s of model FLOPs, MFU "
      "%.1f%%\n",
      step_seconds, args.steps, tokens_per_second, model_flops / 1e9, 100 * mfu);
  if (args.peak_tflops > 0) {
    std::printf("MFU against the given peak of %.0f TFLOP/s: %.1f%%\n", args.peak_tflops, 100 * peak_mfu);
  }
  std::printf("host reads per step (forward+backward): %lld (each a wait for the device: the step's sums)\n",
              (long long)host_reads);
  if (profile) print_profile(*profile);
}

struct DecodeArgs {
  ModelSource source;
  int64_t batch = 8, prompt = 64, new_tokens = 64;
  int runs = 3;
  std::string precision = "auto";
  std::string device = "auto";
  bool profile = false;
};

struct DecodeSeconds {
  double prefill = 0, decode = 0;
};

// One decode run: `count` random prompts prefilled together, then new_tokens steps of greedy decoding (each
// sequence fed its own argmax, as a server at temperature 0). Returns the prefill's seconds (the engine's
// part of the time to the first token) and the decode steps'. A profiler given is cleared after the prefill:
// it times the decode steps alone.
DecodeSeconds time_decode(ZayaModel& model, const ModelDims& dims, const DecodeArgs& args, int64_t count,
                          uint64_t seed, OpProfiler* profiler = nullptr) {
  const RandomStream rng(seed, RngPurpose::Test, 0);
  std::vector<int32_t> prompts(size_t(count * args.prompt));  // [count, prompt]
  for (size_t i = 0; i < prompts.size(); ++i) prompts[i] = int32_t(rng.bits(i) % uint32_t(dims.vocab));
  std::vector<DecodeCache> caches;
  std::vector<DecodeCache*> cache_ptrs;
  std::vector<const int32_t*> starts;
  std::vector<int64_t> lengths(size_t(count), args.prompt);
  caches.reserve(size_t(count));
  for (int64_t b = 0; b < count; ++b) {
    caches.push_back(make_decode_cache(dims, args.prompt + args.new_tokens, model.ops().memory()));
    cache_ptrs.push_back(&caches.back());
    starts.push_back(prompts.data() + b * args.prompt);
  }
  const auto prefill_start = std::chrono::steady_clock::now();
  const float* logits =
      model.prefill(starts.data(), lengths.data(), cache_ptrs.data(), count, ZayaModel::PrefillLogits::Last);
  std::vector<int32_t> next(static_cast<size_t>(count));  // [count]
  auto choose = [&](const float* rows) {                  // [count, vocab]
    for (int64_t b = 0; b < count; ++b)
      next[size_t(b)] = most_likely_token(rows + b * dims.vocab, dims.vocab);
  };
  choose(logits);
  if (profiler) profiler->clear();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t t = 0; t < args.new_tokens; ++t)
    choose(model.decode_batch(next.data(), cache_ptrs.data(), count));
  const auto end = std::chrono::steady_clock::now();
  return {std::chrono::duration<double>(start - prefill_start).count(),
          std::chrono::duration<double>(end - start).count()};
}

// Decode tokens/s of one sequence and of `batch` together, alternated run by run (the same machine state
// for both), each after an untimed warm-up run; then optionally a profiled batched run.
void run_decode_bench(const DecodeArgs& args) {
  const Device device = select_device(args.device, "--device");
  Ops& ops = *device.ops;
  LoadedModel model = bench_model(args.source, 0);
  step_tokens(args.batch, args.prompt);  // the prefill's tokens, within what its sizes hold
  const int64_t context = model.config.max_position_embeddings;
  if (args.new_tokens > context - args.prompt) {
    throw Error(cat("prompts of ", args.prompt, " tokens and ", args.new_tokens,
                    " new ones are more than the model's context of ", context, " (max_position_embeddings)"))
        .field("--prompt");
  }
  const ModelDims& dims = model.params->dims();
  const PrecisionChoice choice =
      resolve_precision(args.precision, device, dominant_products(dims, args.batch), "--precision");
  const Precision precision = choice.precision;
  const std::unique_ptr<ParameterStore> placed =
      device.on_host() ? nullptr : place_parameters(*model.params, ops.memory());
  ZayaModel zaya(placed ? *placed : *model.params, ops, precision);
  // One sequence, and the batch beside it unless the batch is one sequence too.
  const std::vector<int64_t> sizes =
      args.batch == 1 ? std::vector<int64_t>{1} : std::vector<int64_t>{1, args.batch};
  std::vector<double> rates[2], prefill_ms[2];
  for (int run = -1; run < args.runs; ++run) {
    for (size_t which = 0; which < sizes.size(); ++which) {
      const size_t index = run % 2 == 0 ? which : sizes.size() - 1 - which;  // the order flips every run
      const DecodeSeconds seconds = time_decode(zaya, dims, args, sizes[index], uint64_t(run + 1));
      if (run < 0) continue;
      rates[index].push_back(double(sizes[index] * args.new_tokens) / seconds.decode);
      prefill_ms[index].push_back(1e3 * seconds.prefill);
    }
  }
  std::printf("%s: prompts of %lld tokens, %lld new tokens each, %d threads, %s\n",
              args.source.describe().c_str(), (long long)args.prompt, (long long)args.new_tokens,
              num_threads(), choice.description.c_str());
  const double single = median(rates[0]);
  if (sizes.size() == 1) {
    std::printf("decode, median of %d runs: 1 sequence %.1f tokens/s\n", args.runs, single);
    std::printf("prefill, median: 1 prompt %.1f ms\n", median(prefill_ms[0]));
  } else {
    const double batched = median(rates[1]);
    std::printf(
        "decode, medians of %d alternated runs: 1 sequence %.1f tokens/s, %lld sequences %.1f tokens/s "
        "(%.2fx)\n",
        args.runs, single, (long long)args.batch, batched, batched / single);
    std::printf("prefill, medians: 1 prompt %.1f ms, %lld prompts together %.1f ms\n", median(prefill_ms[0]),
                (long long)args.batch, median(prefill_ms[1]));
  }
  if (!args.profile) return;
  OpProfiler profiler(ops);
  ZayaModel profiled(*model.params, profiler.ops(), precision);
  time_decode(profiled, dims, args, args.batch, 0);  // sizes the arenas
  const double seconds = time_decode(profiled, dims, args, args.batch, 0, &profiler).decode;
  std::printf("%lld sequence%s, %lld decode steps profiled (their sums):\n", (long long)args.batch,
              args.batch == 1 ? "" : "s", (long long)args.new_tokens);
  print_profile({seconds, profiler.times()});
}

struct OptimizerArgs {
  ModelSource source;
  int64_t layers = 0;  // 0: all of the model's
  int64_t batch = 16, seq = 512;
  int steps = 3;
  std::string precision = "auto";
  std::string device = "auto";
};

// The optimizer's step time next to the forward+backward time of one batch, on real gradients.
void run_optimizer_bench(const OptimizerArgs& args) {
  const Device device = select_device(args.device, "--device");  // before building a large model
  Ops& ops = *device.ops;
  ZayaConfig config = args.source.config();
  keep_layers(config, args.layers);
  ParameterStore initial(model_dims(config));
  init_parameters(initial, config.initializer_range, 0);
  std::unique_ptr<ParameterStore> placed =
      device.on_host() ? nullptr : place_parameters(initial, ops.memory());
  ParameterStore& params = placed ? *placed : initial;
  const ModelDims& dims = params.dims();
  const int64_t tokens = step_tokens(args.batch, args.seq);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  const RandomStream rng(0, RngPurpose::Test, 0);
  for (int64_t t = 0; t < tokens; ++t) ids[size_t(t)] = int32_t(rng.bits(uint64_t(t)) % uint32_t(dims.vocab));
  const std::vector<int32_t> labels = shifted_labels(ids.data(), args.batch, args.seq);

  const Precision precision =
      resolve_precision(args.precision, device, dominant_products(dims, tokens), "--precision").precision;
  ZayaModel model(params, ops, precision);
  Optimizer optimizer(params, {}, ops, {}, precision);
  std::vector<double> forward_backward, step, muon, adamw;
  for (int i = 0; i < kWarmUpSteps + args.steps; ++i) {
    params.zero_grads();
    ops.synchronize();
    const auto start = std::chrono::steady_clock::now();
    model.forward_backward({ids.data(), labels.data(), nullptr, args.batch, args.seq}, 1.0f / float(tokens));
    ops.synchronize();
    const auto middle = std::chrono::steady_clock::now();
    const OptimizerStepStats stats = optimizer.step(1.0);
    model.weights_changed();  // the bf16 copies are part of a step's update
    ops.synchronize();
    const auto end = std::chrono::steady_clock::now();
    if (i < kWarmUpSteps) continue;
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
  std::printf(
      "%s, %lld layers: %.3g M parameters (Muon %.3g M, AdamW %.3g M), %s, %d threads, precision %s\n",
      args.source.describe().c_str(), (long long)dims.layers, double(muon_params + adamw_params) / 1e6,
      double(muon_params) / 1e6, double(adamw_params) / 1e6, device.description.c_str(), num_threads(),
      std::string(precision_name(precision)).c_str());
  // The optimizer times its halves on the host, which on a GPU is when their kernels were queued.
  char split[64] = "";
  if (device.on_host())
    std::snprintf(split, sizeof split, " (Muon %.3f s, AdamW %.3f s)", median(muon), median(adamw));
  std::printf("forward+backward of %lld tokens: %.3f s; optimizer step: %.3f s%s, medians of %d\n",
              (long long)tokens, fb, opt, split, args.steps);
  std::printf("optimizer / forward+backward = %.3f at %lld tokens per step\n", opt / fb, (long long)tokens);
  // The optimizer's work (Muon's Newton-Schulz above all) is the same for any batch, while forward+backward
  // grows with the tokens an optimizer step accumulates: the batch from which the step costs 5% of it.
  std::printf("optimizer / forward+backward = 0.05 from about %.3g tokens per optimizer step\n",
              opt / (0.05 * fb) * double(tokens));
}

struct OpsArgs {
  ModelSource source;
  int64_t batch = 2, seq = 128;
  std::string precision = "fp32";
  std::string device = "auto";
  int repeats = 5;
  bool json = false;
};

// "12.3 us", "4.56 ms", "1.23 s": op times span microseconds (an elementwise op on a GPU) to seconds.
std::string duration_text(double seconds) {
  char text[32];
  if (seconds < 1e-3) {
    std::snprintf(text, sizeof text, "%.1f us", seconds * 1e6);
  } else if (seconds < 1) {
    std::snprintf(text, sizeof text, "%.2f ms", seconds * 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.2f s", seconds);
  }
  return text;
}

void run_ops_bench(const OpsArgs& args) {
  const ZayaConfig config = args.source.config();
  const int64_t tokens = step_tokens(args.batch, args.seq);
  const Precision precision = args.precision == "bf16" ? Precision::BF16 : Precision::F32;
  const Device device = select_device(args.device, "--device");
  OpCheckOptions options;
  options.precision = precision;
  options.repeats = args.repeats;
  const std::vector<OpCheckResult> results =
      check_ops(op_check_shape(model_dims(config), args.batch, args.seq), cpu_ops(), *device.ops, options);

  if (args.json) {
    nlohmann::json ops = nlohmann::json::array();
    for (const OpCheckResult& r : results) {
      // An unmatched NaN or infinity makes an error infinite, which JSON cannot hold: null.
      ops.push_back({{"op", r.op},
                     {"call", r.call},
                     {"abs_error", r.abs_error},
                     {"rel_error", r.rel_error},
                     {"worst_output", r.worst_output},
                     {"cpu_seconds", r.reference_seconds},
                     {"device_seconds", r.device_seconds}});
    }
    const nlohmann::json out = {{"source", args.source.describe()},
                                {"device", device.description},
                                {"batch", args.batch},
                                {"seq", args.seq},
                                {"tokens", tokens},
                                {"precision", precision_name(precision)},
                                {"repeats", args.repeats},
                                {"threads", num_threads()},
                                {"ops", ops}};
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  const std::string against =
      device.on_host() ? "the CPU against itself" : device.description + " against the CPU";
  std::printf("%s: batch %lld x %lld = %lld tokens, %s; %s (%d thread%s), medians of %d\n",
              args.source.describe().c_str(), (long long)args.batch, (long long)args.seq, (long long)tokens,
              std::string(precision_name(precision)).c_str(), against.c_str(), num_threads(),
              num_threads() == 1 ? "" : "s", args.repeats);
  // Columns as wide as their longest entry: a call names its shapes, longer in a larger model.
  int op_width = 2, call_width = 4;
  for (const OpCheckResult& r : results) {
    op_width = std::max(op_width, int(r.op.size()));
    call_width = std::max(call_width, int(r.call.size()));
  }
  std::printf("%-*s  %-*s  %9s %9s %10s %10s %8s\n", op_width, "op", call_width, "call", "abs err", "rel err",
              "cpu", "device", "speed-up");
  for (const OpCheckResult& r : results) {
    const double speedup = r.device_seconds > 0 ? r.reference_seconds / r.device_seconds : 0.0;
    std::printf("%-*s  %-*s  %9.2e %9.2e %10s %10s %7.2fx\n", op_width, r.op.c_str(), call_width,
                r.call.c_str(), r.abs_error, r.rel_error, duration_text(r.reference_seconds).c_str(),
                duration_text(r.device_seconds).c_str(), speedup);
  }
  std::printf("rel err: the largest error of an output over that output's largest value on the CPU\n");
  std::printf("every op of the table: %zu ops in %zu calls\n", kOpNames.size(), results.size());
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
  step->add_option("--steps", args->steps, "timed steps (after two warm-up steps)")->check(positive());
  step->add_option("--precision", args->precision,
                   "of the products: auto (bf16 on a GPU, or where the CPU has it), fp32, bf16")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}));
  step->add_option("--layers", args->layers, "keep only the first N layers of a preset or config (0: all)")
      ->check(non_negative());
  add_device_option(*step, args->device);
  step->add_option("--peak-tflops", args->peak_tflops,
                   "the device's peak in TFLOP/s (its data sheet): MFU is also printed against it")
      ->check(non_negative());
  step->add_flag("--json", args->json, "print one JSON line");
  step->add_flag("--profile", args->profile,
                 "then a step with each op timed on its own (after two warm-up steps): where its time goes");
  step->callback([args] { run_step_bench(*args); });

  auto opt_args = std::make_shared<OptimizerArgs>();
  CLI::App* optimizer =
      bench->add_subcommand("optimizer", "the optimizer step's time against forward+backward");
  opt_args->source.add_options(*optimizer, true, true);
  optimizer->add_option("--layers", opt_args->layers, "keep only the first N layers (0: all)")
      ->check(non_negative());
  optimizer->add_option("--batch", opt_args->batch, "sequences per step")->check(positive());
  optimizer->add_option("--seq", opt_args->seq, "tokens per sequence")->check(positive());
  optimizer->add_option("--steps", opt_args->steps, "timed steps (after two warm-up steps)")
      ->check(positive());
  optimizer->add_option("--precision", opt_args->precision, "of the products: auto, fp32, bf16")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}));
  add_device_option(*optimizer, opt_args->device);
  optimizer->callback([opt_args] { run_optimizer_bench(*opt_args); });

  auto decode_args = std::make_shared<DecodeArgs>();
  CLI::App* decode = bench->add_subcommand(
      "decode", "decode tokens/s of one sequence and of a batch decoded together (a server's engine)");
  decode_args->source.add_options(*decode, true, true);
  decode->add_option("--batch", decode_args->batch, "sequences decoded together (default 8)")
      ->check(positive());
  decode->add_option("--prompt", decode_args->prompt, "random prompt tokens per sequence (default 64)")
      ->check(positive());
  decode->add_option("--new-tokens", decode_args->new_tokens, "decode steps timed (default 64)")
      ->check(positive());
  decode->add_option("--runs", decode_args->runs, "timed runs of each (default 3; medians)")
      ->check(positive());
  decode->add_option("--precision", decode_args->precision, "of the products: auto, fp32, bf16")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}));
  decode->add_flag("--profile", decode_args->profile,
                   "then a batched run with each op timed on its own: where a decode step's time goes");
  add_device_option(*decode, decode_args->device);
  decode->callback([decode_args] { run_decode_bench(*decode_args); });

  auto ops_args = std::make_shared<OpsArgs>();
  CLI::App* ops = bench->add_subcommand(
      "ops", "every backend op on a device against the CPU on random inputs: its largest error and its time");
  ops_args->source.add_options(*ops, true, false, nullptr, "tiny");
  ops->add_option(
      "--device", ops_args->device,
      "the backend compared with the CPU: auto (a GPU where there is one, default), cpu, cuda or hip");
  ops->add_option("--batch", ops_args->batch,
                  "sequences of the micro-batch the ops are sized for (default 2)")
      ->check(positive());
  ops->add_option("--seq", ops_args->seq, "tokens per sequence (default 128)")->check(positive());
  ops->add_option(
         "--precision", ops_args->precision,
         "of the products, the attention, Newton-Schulz and the loss gradient: fp32 (default) or bf16")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  ops->add_option("--repeats", ops_args->repeats, "timed runs of each op, after the compared one (default 5)")
      ->check(positive());
  ops->add_flag("--json", ops_args->json, "print one JSON line");
  ops->callback([ops_args] { run_ops_bench(*ops_args); });
}

}  // namespace zaya::cli
