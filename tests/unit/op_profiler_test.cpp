// The op profiler (backend/op_profiler.h): a step through it computes exactly what the backend computes
// alone, and its rows count what the step called.

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "backend/op_profiler.h"
#include "backend/ops.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/model_dims.h"
#include "model/model_io.h"
#include "model/parameters.h"
#include "model/zaya_model.h"

namespace zaya {
namespace {

struct Step {
  double loss = 0;
  std::vector<float> grads;
};

Step train_step(ParameterStore& params, Ops& ops, Precision precision, int64_t batch, int64_t seq,
                int64_t vocab) {
  std::vector<int32_t> ids(size_t(batch * seq));
  const RandomStream rng(5, RngPurpose::Test, 0);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(rng.bits(i) % uint32_t(vocab));
  const std::vector<int32_t> labels = shifted_labels(ids.data(), batch, seq);
  ZayaModel model(params, ops, precision);
  params.zero_grads();
  const ForwardResult result =
      model.forward_backward({ids.data(), labels.data(), nullptr, batch, seq}, 1.0f / float(batch * seq));
  return {result.mean_loss(),
          std::vector<float>(params.grads(), params.grads() + params.table().total_floats())};
}

TEST(OpProfiler, AStepThroughItIsTheBackendsBitForBit) {
  for (const Precision precision : {Precision::F32, Precision::BF16}) {
    const ZayaConfig config = preset_config("tiny");
    ParameterStore params(model_dims(config));
    init_parameters(params, config.initializer_range, 6);
    const Step plain = train_step(params, cpu_ops(), precision, 2, 24, config.vocab_size);
    OpProfiler profiler(cpu_ops());
    const Step profiled = train_step(params, profiler.ops(), precision, 2, 24, config.vocab_size);
    EXPECT_EQ(profiled.loss, plain.loss);
    EXPECT_EQ(profiled.grads, plain.grads);

    std::map<std::string, OpTime> rows;
    double previous = 1e300;
    for (const OpTime& row : profiler.times()) {
      EXPECT_LE(row.seconds, previous) << "the slowest first";
      previous = row.seconds;
      EXPECT_GT(row.calls, 0) << row.name;
      rows[row.name] = row;
    }
    // One embedding, one chunk of the loss, an attention forward and backward per layer.
    const int64_t layers = config.num_hidden_layers;
    EXPECT_EQ(rows.at("embedding_forward").calls, 1);
    EXPECT_EQ(rows.at("embedding_backward").calls, 1);
    EXPECT_EQ(rows.at("cross_entropy").calls, 1);
    EXPECT_EQ(rows.at("attention_forward").calls, layers);
    EXPECT_EQ(rows.at("attention_backward").calls, layers);
    // The head's forward product, by its shape and FLOPs: [48 tokens, vocab] from the hidden size.
    const std::string head = cat(precision == Precision::BF16 ? "gemm bf16" : "gemm f32", " A B^T 48x",
                                 config.vocab_size, "x", config.hidden_size);
    ASSERT_TRUE(rows.count(head)) << head;
    EXPECT_EQ(rows.at(head).flops, 2.0 * 48 * double(config.vocab_size) * double(config.hidden_size));
  }
}

TEST(OpProfiler, ClearStartsTheRowsAfresh) {
  OpProfiler profiler(cpu_ops());
  std::vector<float> x(64, 1.0f);
  profiler.ops().fill(x.data(), 64, 2.0f);
  profiler.ops().fill(x.data(), 64, 3.0f);
  ASSERT_EQ(profiler.times().size(), 1u);
  EXPECT_EQ(profiler.times()[0].name, "fill");
  EXPECT_EQ(profiler.times()[0].calls, 2);
  EXPECT_EQ(x[63], 3.0f);
  profiler.clear();
  EXPECT_TRUE(profiler.times().empty());
}

}  // namespace
}  // namespace zaya
