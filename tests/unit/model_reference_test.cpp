// The model against transformers' ZayaForCausalLM: fixtures from tools/reference/gen_model_fixtures.py.

#include <gtest/gtest.h>

#include "backend/ops.h"
#include "model/model_io.h"
#include "model/zaya_model.h"
#include "unit/reference_data.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

class ModelReference : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelReference, LogitsLossChoicesAndGradientsMatchTransformers) {
  const std::string dir = test::fixture(std::string("model/") + GetParam());
  LoadedModel loaded = load_model(dir);
  const test::ReferenceData ref(dir + "/reference.safetensors");
  const Shape ids_shape = ref.shape("input_ids");
  const int64_t B = ids_shape[0], S = ids_shape[1];
  const std::vector<int32_t> ids = ref.ints("input_ids");
  const std::vector<int32_t> mask_ints = ref.ints("attention_mask");
  std::vector<float> mask(mask_ints.begin(), mask_ints.end());
  const std::vector<int32_t> labels = shifted_labels(ids.data(), B, S);

  ZayaModel model(*loaded.params, cpu_ops());
  Batch batch{ids.data(), labels.data(), mask.data(), B, S};
  loaded.params->zero_grads();
  const int64_t labelled = B * (S - 1);
  const ForwardResult result = model.forward_backward(batch, 1.0f / float(labelled), true);

  const ModelDims& dims = loaded.params->dims();
  const std::vector<float> want_logits = ref.floats("logits");
  const std::vector<float> got_logits(result.logits, result.logits + B * S * dims.vocab);
  EXPECT_LE(test::max_abs_diff(got_logits, want_logits), 1e-4 * test::max_abs(want_logits));
  EXPECT_EQ(result.labelled, labelled);
  EXPECT_NEAR(result.mean_loss(), ref.floats("loss")[0], 1e-5);

  const std::vector<int32_t> want_choice = ref.ints("expert_choice");
  const std::vector<int32_t> got_choice(result.expert_choice, result.expert_choice + dims.layers * B * S);
  EXPECT_EQ(got_choice, want_choice);

  int checked = 0;
  for (const ParamInfo& param : loaded.params->table().params()) {
    if (!param.trainable()) continue;
    const std::vector<float> want = ref.floats("grad." + param.name);
    const float* grad = loaded.params->grad(param);
    const std::vector<float> got(grad, grad + param.numel());
    EXPECT_LE(test::relative_error(got, want), 1e-3) << param.name;
    ++checked;
  }
  EXPECT_GT(checked, 20);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelReference, ::testing::Values("basic", "odd", "mha_window"));

}  // namespace
}  // namespace zaya
