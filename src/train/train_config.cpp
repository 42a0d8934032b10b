#include "train/train_config.h"

#include "backend/devices.h"
#include "core/error.h"
#include "core/precision.h"
#include "io/atomic_file.h"
#include "train/toml_reader.h"

namespace zaya {
namespace {

// Calls parse(text) and re-throws its Error as one about `key` of `reader`.
template <class Parse>
auto parse_enum(TomlReader& reader, const char* key, const std::string& fallback, Parse parse) {
  const std::string text = reader.string(key, fallback);
  try {
    return parse(text);
  } catch (const Error& e) {
    reader.fail(key, e.message());
  }
}

void positive(TomlReader& reader, const char* key, double value) {
  if (!(value > 0)) reader.fail(key, "must be positive");
}

void in_unit_interval(TomlReader& reader, const char* key, double value) {
  if (!(value >= 0 && value < 1)) reader.fail(key, "must be in [0, 1)");
}

void read_optimizer(TomlReader section, OptimizerConfig& out) {
  out.lr = float(section.number("lr", out.lr));
  out.weight_decay = float(section.number("weight_decay", out.weight_decay));
  out.grad_clip = float(section.number("grad_clip", out.grad_clip));
  positive(section, "lr", out.lr);
  if (out.weight_decay < 0) section.fail("weight_decay", "must not be negative");
  if (out.grad_clip < 0) section.fail("grad_clip", "must not be negative (0 turns clipping off)");

  TomlReader muon = section.table("muon");
  out.muon.momentum = float(muon.number("momentum", out.muon.momentum));
  out.muon.nesterov = muon.boolean("nesterov", out.muon.nesterov);
  out.muon.ns_steps = muon.integer32("ns_steps", out.muon.ns_steps);
  const std::vector<double> coefficients =
      muon.numbers("ns_coefficients",
                   {out.muon.ns_coefficients[0], out.muon.ns_coefficients[1], out.muon.ns_coefficients[2]});
  if (coefficients.size() != 3) muon.fail("ns_coefficients", "expected three numbers (a, b, c)");
  for (int i = 0; i < 3; ++i) out.muon.ns_coefficients[i] = float(coefficients[size_t(i)]);
  out.muon.rms_scale = float(muon.number("rms_scale", out.muon.rms_scale));
  out.muon.lr_multiplier = float(muon.number("lr_multiplier", out.muon.lr_multiplier));
  in_unit_interval(muon, "momentum", out.muon.momentum);
  if (out.muon.ns_steps < 0 || out.muon.ns_steps > 100) muon.fail("ns_steps", "must be in [0, 100]");
  positive(muon, "rms_scale", out.muon.rms_scale);
  if (out.muon.lr_multiplier < 0) muon.fail("lr_multiplier", "must not be negative");
  muon.finish();

  TomlReader adamw = section.table("adamw");
  out.adamw.beta1 = float(adamw.number("beta1", out.adamw.beta1));
  out.adamw.beta2 = float(adamw.number("beta2", out.adamw.beta2));
  out.adamw.eps = float(adamw.number("eps", out.adamw.eps));
  out.adamw.lr_multiplier = float(adamw.number("lr_multiplier", out.adamw.lr_multiplier));
  in_unit_interval(adamw, "beta1", out.adamw.beta1);
  in_unit_interval(adamw, "beta2", out.adamw.beta2);
  positive(adamw, "eps", out.adamw.eps);
  if (out.adamw.lr_multiplier < 0) adamw.fail("lr_multiplier", "must not be negative");
  adamw.finish();

  if (section.has("groups")) {
    out.groups.clear();
    for (TomlReader rule : section.tables("groups")) {
      GroupRule group;
      group.pattern = rule.string("pattern", "");
      if (group.pattern.empty()) rule.fail("pattern", "missing: a glob over parameter names");
      group.optimizer = parse_enum(rule, "optimizer", "adamw", [](const std::string& name) {
        if (name == "muon") return OptimizerKind::Muon;
        if (name == "adamw") return OptimizerKind::AdamW;
        throw Error("expected \"muon\" or \"adamw\", got \"" + name + "\"");
      });
      group.weight_decay = rule.boolean("weight_decay", false);
      group.lr_multiplier = float(rule.number("lr_multiplier", 1.0));
      if (group.lr_multiplier < 0) rule.fail("lr_multiplier", "must not be negative");
      rule.finish();
      out.groups.push_back(group);
    }
  }
  section.finish();
}

void read_schedule(TomlReader section, ScheduleConfig& out) {
  out.kind = parse_enum(section, "kind", "wsd", parse_schedule_kind);
  out.warmup_tokens = section.integer("warmup_tokens", out.warmup_tokens);
  out.decay_fraction = section.number("decay_fraction", out.decay_fraction);
  out.decay_shape = parse_enum(section, "decay_shape", "linear", parse_decay_shape);
  out.min_lr_ratio = section.number("min_lr_ratio", out.min_lr_ratio);
  if (out.warmup_tokens < 0) section.fail("warmup_tokens", "must not be negative");
  if (!(out.decay_fraction >= 0 && out.decay_fraction <= 1))
    section.fail("decay_fraction", "must be in [0, 1]");
  if (!(out.min_lr_ratio >= 0 && out.min_lr_ratio <= 1)) section.fail("min_lr_ratio", "must be in [0, 1]");
  section.finish();
}

void read_balancing(TomlReader section, BalancingConfig& out) {
  out.mode = parse_enum(section, "mode", "adam", parse_balancing_mode);
  out.lr = float(section.number("lr", out.lr));
  out.beta1 = float(section.number("beta1", out.beta1));
  out.beta2 = float(section.number("beta2", out.beta2));
  out.eps = float(section.number("eps", out.eps));
  out.skip = parse_enum(section, "skip", "free", parse_skip_policy);
  out.skip_target = float(section.number("skip_target", out.skip_target));
  positive(section, "lr", out.lr);
  in_unit_interval(section, "beta1", out.beta1);
  in_unit_interval(section, "beta2", out.beta2);
  positive(section, "eps", out.eps);
  if (!(out.skip_target >= 0 && out.skip_target < 1)) section.fail("skip_target", "must be in [0, 1)");
  section.finish();
}

void read_aux_loss(TomlReader section, RouterAuxLoss& out) {
  out.switch_weight = float(section.number("switch_weight", out.switch_weight));
  out.z_weight = float(section.number("z_weight", out.z_weight));
  if (out.switch_weight < 0) section.fail("switch_weight", "must not be negative");
  if (out.z_weight < 0) section.fail("z_weight", "must not be negative");
  section.finish();
}

void read_batch(TomlReader section, BatchRampConfig& out) {
  out.micro_batch = section.integer("micro_batch", out.micro_batch);
  out.end_sequences = section.integer("sequences", out.end_sequences);
  out.start_sequences = section.integer("start_sequences", out.start_sequences);
  out.ramp_tokens = section.integer("ramp_tokens", out.ramp_tokens);
  out.sqrt_lr_scaling = section.boolean("sqrt_lr_scaling", out.sqrt_lr_scaling);
  if (out.micro_batch <= 0) section.fail("micro_batch", "must be positive");
  if (out.end_sequences <= 0) section.fail("sequences", "must be positive");
  if (out.end_sequences % out.micro_batch) section.fail("sequences", "must be a multiple of micro_batch");
  if (out.start_sequences < 0 || out.start_sequences % out.micro_batch) {
    section.fail("start_sequences", "must be a multiple of micro_batch (0: no ramp)");
  }
  if (out.start_sequences > out.end_sequences) section.fail("start_sequences", "must not exceed sequences");
  if (out.ramp_tokens < 0) section.fail("ramp_tokens", "must not be negative");
  section.finish();
}

void read_run(TomlReader section, RunSection& out) {
  out.seed = uint64_t(section.integer("seed", int64_t(out.seed)));
  out.threads = section.integer32("threads", out.threads);
  if (out.threads < 0) section.fail("threads", "must not be negative");
  out.adapt_threads = section.boolean("adapt_threads", out.adapt_threads);
  out.expert_parallel = section.integer32("expert_parallel", out.expert_parallel);
  if (out.expert_parallel < 1) section.fail("expert_parallel", "must be at least 1");
  out.context_parallel = section.integer32("context_parallel", out.context_parallel);
  if (out.context_parallel < 1) section.fail("context_parallel", "must be at least 1");
  out.hang_timeout_s = section.number("hang_timeout_s", out.hang_timeout_s);
  if (!(out.hang_timeout_s >= 0 && out.hang_timeout_s <= 1e7))
    section.fail("hang_timeout_s", "must be between 0 (never) and 10000000 seconds");
  out.gradient_bucket_mb = section.number("gradient_bucket_mb", out.gradient_bucket_mb);
  if (!(out.gradient_bucket_mb >= 0 && out.gradient_bucket_mb <= 1e6))
    section.fail("gradient_bucket_mb", "must be between 0 and 1000000");
  out.precision = section.string("precision", out.precision);
  if (out.precision != "auto" && !precision_from_name(out.precision))
    section.fail("precision", "expected \"auto\", \"fp32\" or \"bf16\"");
  out.device = section.string("device", out.device);
  if (!is_device_name(out.device)) section.fail("device", "expected \"auto\", \"cpu\", \"cuda\" or \"hip\"");
  const std::string recompute = section.string("recompute", recompute_name(out.recompute));
  if (const std::optional<Recompute> parsed = recompute_from_name(recompute))
    out.recompute = *parsed;
  else
    section.fail("recompute", "expected \"none\", \"attention\" or \"layer\"");
  out.communicator = section.string("communicator", out.communicator);
  if (!is_communicator_name(out.communicator))
    section.fail("communicator", "expected \"auto\", \"mpi\" or \"nccl\"");
  section.finish();
}

void read_model(TomlReader section, ModelSection& out) {
  out.preset = section.string("preset", out.preset);
  out.config = section.string("config", out.config);
  out.init = section.string("init", out.init);
  out.vocab_size = section.integer("vocab_size", out.vocab_size);
  out.dtype = section.string("dtype", out.dtype);
  out.router_init = section.string("router_init", out.router_init);
  if (out.router_init != "reference" && out.router_init != "fan_in") {
    section.fail("router_init", "expected \"reference\" (transformers' init) or \"fan_in\"");
  }
  const int sources = !out.preset.empty() + !out.config.empty() + !out.init.empty();
  if (sources != 1) section.fail("preset", "give exactly one of preset, config or init");
  if (out.vocab_size < 0) section.fail("vocab_size", "must not be negative");
  if (out.dtype != "float32" && out.dtype != "bfloat16")
    section.fail("dtype", "expected \"float32\" or \"bfloat16\"");
  section.finish();
}

void read_data(TomlReader section, DataSection& out) {
  out.tokenizer = section.string("tokenizer", out.tokenizer);
  out.validation = section.string("validation", out.validation);
  if (out.tokenizer.empty()) section.fail("tokenizer", "missing: the run needs a tokenizer.json");
  section.finish();
}

void read_stages(std::vector<TomlReader> sections, std::vector<StageConfig>& out, TomlReader& root) {
  if (sections.empty())
    root.fail("stages", "missing: at least one [[stages]] with tokens, seq_len and mixture");
  for (TomlReader& section : sections) {
    StageConfig stage;
    stage.name = section.string("name", "stage" + std::to_string(out.size() + 1));
    stage.tokens = section.integer("tokens", 0);
    stage.seq_len = section.integer("seq_len", 0);
    stage.rope_theta = section.number("rope_theta", 0.0);
    stage.lr_multiplier = section.number("lr_multiplier", 1.0);
    // Token counts are summed over stages and multiplied by small factors (schedules, rates): at most 2^56
    // (a thousand times any run yet) keeps every such sum inside int64.
    constexpr int64_t kMaxTokens = int64_t(1) << 56;
    if (stage.tokens <= 0 || stage.tokens > kMaxTokens)
      section.fail("tokens", cat("must be between 1 and ", kMaxTokens, ", got ", stage.tokens));
    if (stage.seq_len <= 0 || stage.seq_len > (int64_t(1) << 31))
      section.fail("seq_len", cat("must be between 1 and ", int64_t(1) << 31, ", got ", stage.seq_len));
    if (stage.rope_theta < 0) section.fail("rope_theta", "must be positive (or 0 to keep the model's)");
    if (stage.lr_multiplier < 0) section.fail("lr_multiplier", "must not be negative");
    TomlReader mixture = section.table("mixture");
    for (const std::string& prefix : mixture.keys()) {
      const double weight = mixture.number(prefix.c_str(), 0.0);
      if (!(weight > 0)) mixture.fail(prefix, "weight must be positive");
      stage.mixture.push_back({prefix, weight});
    }
    if (stage.mixture.empty()) section.fail("mixture", "missing: { \"path/prefix\" = weight, ... }");
    mixture.finish();
    section.finish();
    out.push_back(std::move(stage));
  }
}

void read_checkpoint(TomlReader section, CheckpointSection& out) {
  out.every_steps = section.integer("every_steps", out.every_steps);
  out.every_minutes = section.number("every_minutes", out.every_minutes);
  out.keep = section.integer32("keep", out.keep);
  if (out.every_steps < 0) section.fail("every_steps", "must not be negative");
  if (out.every_minutes < 0) section.fail("every_minutes", "must not be negative");
  if (out.keep < 1) section.fail("keep", "must be at least 1");
  section.finish();
}

void read_eval(TomlReader section, EvalSection& out) {
  out.every_steps = section.integer("every_steps", out.every_steps);
  out.tokens = section.integer("tokens", out.tokens);
  out.micro_batch = section.integer("micro_batch", out.micro_batch);
  if (out.every_steps < 0) section.fail("every_steps", "must not be negative");
  if (out.tokens <= 0) section.fail("tokens", "must be positive");
  if (out.micro_batch <= 0) section.fail("micro_batch", "must be positive");
  section.finish();
}

void read_sample(TomlReader section, SampleSection& out) {
  out.every_steps = section.integer("every_steps", out.every_steps);
  out.prompt = section.string("prompt", out.prompt);
  out.max_new_tokens = section.integer("max_new_tokens", out.max_new_tokens);
  out.temperature = section.number("temperature", out.temperature);
  out.top_p = section.number("top_p", out.top_p);
  if (out.every_steps < 0) section.fail("every_steps", "must not be negative");
  if (out.max_new_tokens < 0) section.fail("max_new_tokens", "must not be negative");
  if (out.temperature < 0) section.fail("temperature", "must not be negative (0: greedy)");
  if (!(out.top_p > 0 && out.top_p <= 1)) section.fail("top_p", "must be in (0, 1]");
  section.finish();
}

void read_log(TomlReader section, LogSection& out) {
  out.every_steps = section.integer("every_steps", out.every_steps);
  out.console_seconds = section.number("console_seconds", out.console_seconds);
  out.tensorboard = section.boolean("tensorboard", out.tensorboard);
  out.max_bad_steps = section.integer32("max_bad_steps", out.max_bad_steps);
  if (out.every_steps < 1) section.fail("every_steps", "must be at least 1");
  if (!(out.console_seconds > 0)) section.fail("console_seconds", "must be positive");
  if (out.max_bad_steps < 1) section.fail("max_bad_steps", "must be at least 1");
  section.finish();
}

void read_debug(TomlReader section, DebugSection& out) {
  for (double step : section.numbers("nan_steps", {})) {
    if (step < 1 || step != double(int64_t(step))) section.fail("nan_steps", "expected step numbers from 1");
    out.nan_steps.push_back(int64_t(step));
  }
  out.fail_rank = section.integer("fail_rank", 0);
  out.fail_step = section.integer("fail_step", 0);
  if (out.fail_rank < 0) section.fail("fail_rank", "must not be negative");
  if (out.fail_step < 0) section.fail("fail_step", "must not be negative");
  section.finish();
}

}  // namespace

int64_t TrainConfig::total_tokens() const {
  int64_t total = 0;
  for (const StageConfig& stage : stages) total += stage.tokens;
  return total;
}

TrainConfig parse_train_config(std::string_view text, const std::string& source,
                               const std::vector<std::string>& overrides) {
  const toml::table root = parse_toml(text, source, overrides);
  TomlReader reader(&root, "", &source);
  TrainConfig config;
  config.source = source;
  config.settings = flatten_toml(root);
  read_run(reader.table("run"), config.run);
  read_model(reader.table("model"), config.model);
  read_data(reader.table("data"), config.data);
  read_stages(reader.tables("stages"), config.stages, reader);
  read_checkpoint(reader.table("checkpoint"), config.checkpoint);
  read_eval(reader.table("eval"), config.eval);
  read_sample(reader.table("sample"), config.sample);
  read_log(reader.table("log"), config.log);
  read_debug(reader.table("debug"), config.debug);
  read_optimizer(reader.table("optimizer"), config.optimizer);
  read_schedule(reader.table("schedule"), config.schedule);
  read_balancing(reader.table("balancing"), config.balancing);
  read_aux_loss(reader.table("aux_loss"), config.aux_loss);
  read_batch(reader.table("batch"), config.batch);
  reader.finish();
  return config;
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_train_config(read_text_file(path), path, overrides);
}

}  // namespace zaya
