// `zaya forward --model DIR --input IN.safetensors --output OUT.safetensors [--grads]`: one forward (and
// optionally backward) pass on a batch, writing what transformers' ZayaForCausalLM would give for it.

#include <CLI/CLI.hpp>
#include <cstring>
#include <memory>

#include "backend/devices.h"
#include "backend/ops.h"
#include "backend/precision_policy.h"
#include "cli/commands.h"
#include "cli/device_option.h"
#include "cli/output_guard.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/model_io.h"
#include "model/zaya_model.h"

namespace zaya::cli {
namespace {

struct ForwardArgs {
  std::string model, input, output;
  std::string precision = "fp32";  // the exact numbers by default: this command is for inspection
  std::string device = "auto";
  bool grads = false;
  bool force = false;
};

// input_ids or attention_mask as int32, from I32 or I64 [batch, seq].
std::vector<int32_t> read_ids(const SafetensorsFile& file, const SafetensorsEntry& entry, const Shape& want) {
  if (entry.dtype != DType::I32 && entry.dtype != DType::I64) {
    throw Error("expected int32 or int64, got " + std::string(dtype_name(entry.dtype)))
        .file(file.path())
        .tensor(entry.name);
  }
  if (entry.shape.rank() != 2 || (want.rank() == 2 && !(entry.shape == want))) {
    throw Error("expected shape [batch, seq]" + (want.rank() ? " = " + want.to_string() : std::string()) +
                ", got " + entry.shape.to_string())
        .file(file.path())
        .tensor(entry.name);
  }
  const auto* bytes = static_cast<const unsigned char*>(file.view(entry).data);
  std::vector<int32_t> out(size_t(entry.shape.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    if (entry.dtype == DType::I64) {
      int64_t value;
      std::memcpy(&value, bytes + 8 * i, 8);
      if (value < INT32_MIN || value > INT32_MAX)
        throw Error(cat("value ", value, " out of range")).file(file.path()).tensor(entry.name);
      out[i] = int32_t(value);
    } else {
      std::memcpy(&out[i], bytes + 4 * i, 4);
    }
  }
  return out;
}

void run_forward(const ForwardArgs& args) {
  check_output_file(args.output, "--output", {args.model, args.input}, args.force);
  const Device device = select_device(args.device, "--device");  // before reading a large model
  LoadedModel loaded = load_model(args.model);
  const SafetensorsFile input(args.input);
  const SafetensorsEntry* ids_entry = input.find("input_ids");
  if (!ids_entry) throw Error("no input_ids tensor").file(args.input).tensor("input_ids");
  const std::vector<int32_t> ids = read_ids(input, *ids_entry, {});
  const int64_t batch = ids_entry->shape[0], seq = ids_entry->shape[1];
  const ModelDims& model_dims = loaded.params->dims();
  const int64_t context = loaded.config.max_position_embeddings;
  if (seq > context) {
    throw Error(cat("rows of ", seq, " tokens are longer than the model's context of ", context,
                    " (max_position_embeddings)"))
        .file(args.input)
        .tensor("input_ids");
  }
  for (int64_t i = 0; i < batch * seq; ++i) {
    if (ids[size_t(i)] < 0 || ids[size_t(i)] >= model_dims.vocab) {
      throw Error(cat("token id ", ids[size_t(i)], " at [", i / seq, ", ", i % seq,
                      "] is outside the vocabulary of ", model_dims.vocab))
          .file(args.input)
          .tensor("input_ids");
    }
  }
  std::vector<float> mask;
  if (const SafetensorsEntry* mask_entry = input.find("attention_mask")) {
    for (int32_t value : read_ids(input, *mask_entry, ids_entry->shape)) {
      if (value != 0 && value != 1)
        throw Error("values must be 0 or 1").file(args.input).tensor("attention_mask");
      mask.push_back(float(value));
    }
  }
  const std::vector<int32_t> labels = shifted_labels(ids.data(), batch, seq);

  Ops& ops = *device.ops;
  std::unique_ptr<ParameterStore> placed =
      device.on_host() ? nullptr : place_parameters(*loaded.params, ops.memory());
  ParameterStore& params = placed ? *placed : *loaded.params;
  const Precision precision =
      resolve_precision(args.precision, device, dominant_products(params.dims(), batch * seq), "--precision")
          .precision;
  ZayaModel model(params, ops, precision);
  const Batch data{ids.data(), labels.data(), mask.empty() ? nullptr : mask.data(), batch, seq};
  ForwardResult result;
  if (args.grads) {
    params.zero_grads();
    result = model.forward_backward(data, 1.0f / float(std::max<int64_t>(1, batch * (seq - 1))), true);
  } else {
    result = model.forward(data, true);
  }

  // What the device computed, read to the host: [batch, seq, vocab] logits, [layers, batch, seq] choices,
  // and every trainable parameter's gradient.
  const ModelDims& dims = params.dims();
  float loss = float(result.mean_loss());
  std::vector<float> logits(size_t(batch * seq * dims.vocab));
  ops.read_to_host(logits.data(), result.logits, logits.size() * sizeof(float));
  std::vector<int32_t> choices(size_t(dims.layers * batch * seq));
  ops.read_to_host(choices.data(), result.expert_choice, choices.size() * sizeof(int32_t));
  SafetensorsWriter writer;
  writer.add("logits", {logits.data(), DType::F32, {batch, seq, dims.vocab}});
  writer.add("loss", {&loss, DType::F32, {}});
  writer.add("expert_choice", {choices.data(), DType::I32, {dims.layers, batch, seq}});
  std::vector<std::vector<float>> grads;
  grads.reserve(params.table().params().size());
  if (args.grads) {
    for (const ParamInfo& param : params.table().params()) {
      if (!param.trainable()) continue;
      grads.emplace_back(size_t(param.numel()));
      ops.read_to_host(grads.back().data(), params.grad(param), grads.back().size() * sizeof(float));
      writer.add("grad." + param.name, {grads.back().data(), DType::F32, param.shape});
    }
  }
  writer.write(args.output);
  std::printf("loss %.6f over %lld positions; wrote %s\n", loss, (long long)result.labelled,
              args.output.c_str());
}

}  // namespace

void add_forward_command(CLI::App& app) {
  auto args = std::make_shared<ForwardArgs>();
  CLI::App* command =
      app.add_subcommand("forward", "run a model on a batch: logits, loss, expert choices, gradients");
  command->add_option("--model", args->model, "model directory (config.json + safetensors)")->required();
  command
      ->add_option("--input", args->input, "safetensors with input_ids [B,S] and optionally attention_mask")
      ->required();
  command->add_option("--output", args->output, "safetensors to write")->required();
  command->add_flag("--force", args->force, "replace the file at --output, or write it over an input");
  command->add_flag("--grads", args->grads, "also write grad.<name> of the mean loss for every parameter");
  command->add_option("--precision", args->precision, "of the products: fp32 (default), bf16, or auto")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}));
  add_device_option(*command, args->device);
  command->callback([args] { run_forward(*args); });
}

}  // namespace zaya::cli
