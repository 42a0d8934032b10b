#include "cli/model_with_tokenizer.h"

#include <CLI/CLI.hpp>
#include <filesystem>

#include "backend/ops.h"
#include "backend/precision_policy.h"
#include "core/error.h"
#include "model/model_dims.h"

namespace zaya::cli {

ModelWithTokenizer load_model_with_tokenizer(const std::string& model_dir, const std::string& tokenizer_path,
                                             const std::string& device_setting,
                                             const std::string& precision_setting, int64_t rows_per_pass) {
  const Device device = select_device(device_setting, "--device");
  // "auto" measures the model's products before its weights are read (in bf16 the experts load as bf16).
  std::vector<ProductShape> products;
  if (precision_setting == "auto") {
    products = dominant_products(
        model_dims(load_config((std::filesystem::path(model_dir) / "config.json").string())), rows_per_pass);
  }
  const PrecisionChoice choice = resolve_precision(precision_setting, device, products, "--precision");
  const Precision precision = choice.precision;
  const std::string path = tokenizer_path.empty()
                               ? (std::filesystem::path(model_dir) / "tokenizer.json").string()
                               : tokenizer_path;
  Tokenizer tokenizer = Tokenizer::load(path);
  LoadedModel model =
      load_model(model_dir, precision == Precision::BF16 ? ExpertValues::Bf16 : ExpertValues::F32);
  if (tokenizer.vocab_size() > model.params->dims().vocab) {
    throw Error(
        cat("has ", tokenizer.vocab_size(), " tokens, more than the model's ", model.params->dims().vocab))
        .file(path);
  }
  std::unique_ptr<ParameterStore> placed =
      device.on_host() ? nullptr : place_parameters(*model.params, device.ops->memory());
  return {std::move(model),   std::move(tokenizer), path, device, precision,
          choice.description, std::move(placed)};
}

void add_precision_option(CLI::App& command, std::string& setting) {
  setting = "fp32";
  command
      .add_option("--precision", setting,
                  "of the products: fp32 (default: transformers' numbers), bf16 (about twice the speed, the "
                  "weights in half the memory), or auto")
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}));
}

}  // namespace zaya::cli
