#pragma once
// What the commands that read and write text with a model (generate, eval, serve) load: the model directory
// and its tokenizer.json (or another one), checked against each other.

#include <cstdint>
#include <memory>
#include <string>

#include "backend/devices.h"
#include "core/precision.h"
#include "model/model_io.h"
#include "tokenizer/tokenizer.h"

namespace CLI {
class App;
}  // namespace CLI

namespace zaya::cli {

struct ModelWithTokenizer {
  LoadedModel model;
  Tokenizer tokenizer;
  std::string tokenizer_path;
  Device device;                           // the model's ops
  Precision precision;                     // the one to build the ZayaModel in: its store was loaded for it
  std::string precision_description;       // for the log: the precision, and how "auto" chose it
  std::unique_ptr<ParameterStore> placed;  // the model's values in the device's memory (null on the CPU)

  // The store to build the ZayaModel on: in the device's memory.
  ParameterStore& params() { return placed ? *placed : *model.params; }
};

// tokenizer_path empty: the model directory's tokenizer.json. Throws Error when the tokenizer has ids the
// model has no embedding for, or `device_setting` (a --device) names no device here. The model only runs
// forward, in the precision `precision_setting` (a --precision, see
// add_precision_option) resolves to on that device ("auto": measured on the products of passes over
// `rows_per_pass` rows, the command's usual): in bf16 it holds its expert weights as bf16 alone
// (ExpertValues::Bf16).
ModelWithTokenizer load_model_with_tokenizer(const std::string& model_dir, const std::string& tokenizer_path,
                                             const std::string& device_setting,
                                             const std::string& precision_setting, int64_t rows_per_pass);

// Those commands' --precision (fp32, bf16 or auto; fp32 by default, transformers' numbers, as scoring
// expects), into `setting` (for load_model_with_tokenizer).
void add_precision_option(CLI::App& command, std::string& setting);

}  // namespace zaya::cli
