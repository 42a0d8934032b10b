// The model's contracts beyond matching the reference: initialisation, model directories, determinism,
// a training step that allocates nothing after warm-up, parameter counts, bad input.

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <tuple>

#include "backend/ops.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/vec_math.h"
#include "infer/generator.h"
#include "io/safetensors_index.h"
#include "model/model_io.h"
#include "model/model_stats.h"
#include "model/zaya_model.h"
#include "optim/optimizer.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

ZayaConfig tiny() {
  return preset_config("tiny");
}

std::vector<int32_t> random_ids(int64_t count, int64_t vocab, uint64_t stream) {
  const RandomStream rng(5, RngPurpose::Test, stream);
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) ids[size_t(i)] = int32_t(rng.bits(uint64_t(i)) % uint32_t(vocab));
  return ids;
}

TEST(ModelInit, FollowsTransformersInitWeights) {
  const ZayaConfig config = tiny();
  ParameterStore params(model_dims(config));
  init_parameters(params, config.initializer_range, 3);
  for (const ParamInfo& p : params.table().params()) {
    const float* v = params.value(p);
    double sum = 0, sum_sq = 0;
    for (int64_t i = 0; i < p.numel(); ++i) {
      sum += v[i];
      sum_sq += double(v[i]) * v[i];
    }
    switch (p.role) {
      case ParamRole::Embedding:
      case ParamRole::AttentionWeight:
      case ParamRole::ExpertWeight:
      case ParamRole::ConvWeight:
      case ParamRole::RouterWeight:
        if (p.numel() >= 4096) {
          EXPECT_NEAR(std::sqrt(sum_sq / double(p.numel())), config.initializer_range,
                      0.1 * config.initializer_range)
              << p.name;
          EXPECT_NEAR(sum / double(p.numel()), 0.0, 0.1 * config.initializer_range) << p.name;
        }
        break;
      case ParamRole::Norm:
      case ParamRole::ResidualScale:
      case ParamRole::InputScale:
      case ParamRole::RouterStatesScale:
        EXPECT_EQ(sum, double(p.numel())) << p.name;
        EXPECT_EQ(sum_sq, double(p.numel())) << p.name;
        break;
      case ParamRole::BalancingBias:
        EXPECT_EQ(v[p.numel() - 1], -1.0f) << p.name;
        EXPECT_EQ(sum_sq, 1.0) << p.name;
        break;
      default:  // biases and key temperatures start at zero
        EXPECT_EQ(sum_sq, 0.0) << p.name;
    }
  }
  const float* embed = params.value(params.table().at("model.embed_tokens.weight"));
  for (int64_t j = 0; j < config.hidden_size; ++j) EXPECT_EQ(embed[j], 0.0f);  // padding row 0
}

TEST(ModelInit, DoesNotDependOnTheThreadCount) {
  const ZayaConfig config = tiny();
  ParameterStore one(model_dims(config)), two(model_dims(config));
  omp_set_num_threads(1);
  init_parameters(one, 0.02, 11);
  omp_set_num_threads(2);
  init_parameters(two, 0.02, 11);
  EXPECT_EQ(std::memcmp(one.values(), two.values(), size_t(one.table().total_floats()) * 4), 0);
  ParameterStore other(model_dims(config));
  init_parameters(other, 0.02, 12);
  EXPECT_NE(std::memcmp(one.values(), other.values(), size_t(one.table().total_floats()) * 4), 0);
}

// Expert parallelism: a store of some experts holds the rows of transformers' [E, ...] tensors that the
// whole model has there (drawn by init, read from a model directory), the expert weights after the dense
// parameters, and refuses what needs every expert.
TEST(ExpertSlice, HoldsItsRowsOfTheWholeModel) {
  test::TempDir dir;
  const ZayaConfig config = tiny();
  const ModelDims dims = model_dims(config);
  ASSERT_EQ(dims.experts % 2, 0);
  const int64_t half = dims.experts / 2;
  ParameterStore whole(dims);
  init_parameters(whole, 0.02, 3);
  save_model(config, whole, dir.file("model"));
  for (int64_t part = 0; part < 2; ++part) {
    SCOPED_TRACE("experts from " + std::to_string(part * half));
    ParameterStore drawn(dims, {part * half, half}), loaded(dims, {part * half, half});
    init_parameters(drawn, 0.02, 3);
    load_weights(dir.file("model"), loaded, config.tie_word_embeddings);
    EXPECT_FALSE(drawn.table().holds_all_experts());
    int64_t expert_floats = 0;
    for (const ParamInfo& param : drawn.table().params()) {
      const ParamInfo& full = whole.table().at(param.name);
      EXPECT_EQ(param.role == ParamRole::ExpertWeight, param.offset >= drawn.table().dense_floats())
          << param.name;
      EXPECT_TRUE(param.model_shape == full.shape) << param.name;
      const float* want = whole.value(full);
      if (param.role == ParamRole::ExpertWeight) {
        EXPECT_EQ(param.shape[0], half) << param.name;
        want += part * half * (full.numel() / dims.experts);
        expert_floats += param.numel();
      }
      const size_t bytes = size_t(param.numel()) * sizeof(float);
      EXPECT_EQ(std::memcmp(drawn.value(param), want, bytes), 0) << param.name;
      EXPECT_EQ(std::memcmp(loaded.value(param), want, bytes), 0) << param.name;
    }
    int64_t whole_expert_floats = 0;
    for (const ParamInfo& param : whole.table().params())
      whole_expert_floats += param.role == ParamRole::ExpertWeight ? param.numel() : 0;
    EXPECT_EQ(2 * expert_floats, whole_expert_floats);

    EXPECT_THROW(save_model(config, drawn, dir.file("part")), Error);
    ZayaModel model(drawn, cpu_ops());
    const std::vector<int32_t> ids = random_ids(8, dims.vocab, 1);
    try {
      model.forward({ids.data(), nullptr, nullptr, 1, 8});
      ADD_FAILURE() << "a forward pass without the other experts";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expert-parallel group"), std::string::npos) << e.what();
    }
    DecodeCache cache = make_decode_cache(dims, 4);
    EXPECT_THROW(model.decode_step(ids[0], cache), Error);
    EXPECT_THROW(model.set_expert_group(nullptr), Error);  // not all experts, and no group to share them
  }
}

TEST(ModelDirectory, RoundTripsInFloat32AndBfloat16AndShards) {
  test::TempDir dir;
  const ZayaConfig config = tiny();
  ParameterStore params(model_dims(config));
  init_parameters(params, 0.02, 1);
  save_model(config, params, dir.file("f32"));
  LoadedModel back = load_model(dir.file("f32"));
  EXPECT_EQ(std::memcmp(back.params->values(), params.values(), size_t(params.table().total_floats()) * 4),
            0);
  EXPECT_TRUE(std::filesystem::exists(dir.file("f32/generation_config.json")));
  EXPECT_EQ(back.config.hidden_size, config.hidden_size);
  EXPECT_EQ(back.config.layer_types, config.layer_types);

  save_model(config, params, dir.file("bf16"), {"bfloat16", size_t(1) << 16});
  EXPECT_TRUE(std::filesystem::exists(dir.file("bf16/model.safetensors.index.json")));
  back = load_model(dir.file("bf16"));
  EXPECT_EQ(back.config.dtype, "bfloat16");
  for (const ParamInfo& p : params.table().params()) {
    const float* want = params.value(p);
    const float* got = back.params->value(p);
    for (int64_t i = 0; i < p.numel(); ++i) ASSERT_EQ(got[i], bf16_to_f32(f32_to_bf16(want[i]))) << p.name;
  }
}

class ModelDirectoryErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = tiny();
    params_ = std::make_unique<ParameterStore>(model_dims(config_));
    init_parameters(*params_, 0.02, 1);
  }
  // Writes the model with `edit` applied to its tensor list, then expects load_model to name `fragment`.
  void expect_load_error(const std::function<void(std::vector<std::pair<std::string, TensorView>>&)>& edit,
                         const std::string& fragment) {
    save_model(config_, *params_, dir_.path());
    std::vector<std::pair<std::string, TensorView>> tensors;
    for (const ParamInfo& p : params_->table().params()) tensors.emplace_back(p.name, params_->value_view(p));
    edit(tensors);
    write_weight_set(dir_.path(), tensors, size_t(1) << 30, {});
    try {
      load_model(dir_.path());
      FAIL() << "loaded a broken model, expected: " << fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }
  test::TempDir dir_;
  ZayaConfig config_;
  std::unique_ptr<ParameterStore> params_;
};

TEST_F(ModelDirectoryErrors, NameTheTensor) {
  expect_load_error([](auto& t) { t.erase(t.begin() + 3); }, "lacks this parameter");
  expect_load_error(
      [](auto& t) {
        t[0].second.shape = Shape{t[0].second.shape[0] / 2, t[0].second.shape[1]};
      },
      "tensor 'model.embed_tokens.weight': shape");
  int32_t ints[4] = {};
  expect_load_error(
      [&](auto& t) {
        t.emplace_back("model.extra.weight", TensorView{ints, DType::F32, {4}});
      },
      "tensor 'model.extra.weight'");
  expect_load_error([&](auto& t) { t.back().second.dtype = DType::I32; }, "is not supported");
  test::write_bytes(dir_.file("config.json"), "{\"num_hidden_layers\": \"two\"}");
  EXPECT_THROW(load_model(dir_.path()), Error);
}

TEST(ZayaModel, TrainingStepIsDeterministicAndAllocatesNothingAfterWarmUp) {
  const ZayaConfig config = tiny();
  ParameterStore params(model_dims(config));
  init_parameters(params, 0.02, 2);
  const int64_t B = 3, S = 40;
  const std::vector<int32_t> ids = random_ids(B * S, config.vocab_size, 0);
  const std::vector<int32_t> labels = shifted_labels(ids.data(), B, S);
  ZayaModel model(params, cpu_ops());
  const Batch batch{ids.data(), labels.data(), nullptr, B, S};

  std::vector<float> first;
  size_t allocations_after_warm_up = 0;
  for (int step = 0; step < 4; ++step) {
    params.zero_grads();
    const ForwardResult result = model.forward_backward(batch, 1.0f / float(B * (S - 1)));
    EXPECT_TRUE(std::isfinite(result.loss_sum));
    const std::vector<float> grads(params.grads(), params.grads() + params.table().total_floats());
    if (step == 0) first = grads;
    EXPECT_EQ(std::memcmp(grads.data(), first.data(), grads.size() * 4), 0) << "step " << step;
    if (step == 1) allocations_after_warm_up = model.arena_allocations();
  }
  EXPECT_EQ(model.arena_allocations(), allocations_after_warm_up);
}

// Recompute changes what a training pass keeps, never its numbers: the loss, the expert choices, the router
// statistics and every gradient are byte for byte those of a pass that keeps everything, with padding and the
// auxiliary router losses on, in f32 and (where the CPU has it) bf16; and a pass after one with recompute
// still decodes as before.
TEST(ZayaModel, RecomputeGivesByteIdenticalGradients) {
  const ZayaConfig config = tiny();
  ParameterStore params(model_dims(config));
  init_parameters(params, 0.3, 4);
  const int64_t B = 3, S = 33, T = B * S;
  const std::vector<int32_t> ids = random_ids(T, config.vocab_size, 6);
  const std::vector<int32_t> labels = shifted_labels(ids.data(), B, S);
  std::vector<float> mask(size_t(T), 1.0f);
  std::fill(mask.begin() + 2 * S + 20, mask.end(), 0.0f);  // the third sequence padded after 20 tokens
  const Batch batch{ids.data(), labels.data(), mask.data(), B, S};
  const int64_t floats = params.table().total_floats(), layers = params.dims().layers;
  for (const Precision precision : {Precision::F32, Precision::BF16}) {
    if (precision == Precision::BF16 && !cpu_ops().fast_bf16()) continue;
    ZayaModel model(params, cpu_ops(), precision);
    model.set_router_aux_loss({0.01f, 0.001f});
    std::vector<float> kept_grads;
    std::vector<int32_t> kept_choices;
    ForwardResult kept;
    for (const Recompute recompute : {Recompute::None, Recompute::Attention, Recompute::Layer}) {
      model.set_recompute(recompute);
      params.zero_grads();
      const ForwardResult result = model.forward_backward(batch, 1.0f / float(T));
      const std::vector<float> grads(params.grads(), params.grads() + floats);
      const std::vector<int32_t> choices(result.expert_choice, result.expert_choice + layers * T);
      const std::string what = cat(recompute_name(recompute), " in ", precision_name(precision));
      if (recompute == Recompute::None) {
        kept = result;
        kept_grads = grads;
        kept_choices = choices;
        continue;
      }
      EXPECT_EQ(result.loss_sum, kept.loss_sum) << what;
      EXPECT_EQ(result.aux_loss_sum, kept.aux_loss_sum) << what;
      EXPECT_EQ(choices, kept_choices) << what;
      EXPECT_EQ(std::memcmp(grads.data(), kept_grads.data(), size_t(floats) * sizeof(float)), 0) << what;
    }
  }
  ZayaModel model(params, cpu_ops());
  model.set_recompute(Recompute::Layer);
  model.forward_backward(batch, 1.0f / float(T));
  DecodeCache cache = make_decode_cache(params.dims(), 8);
  const float* logits = model.decode_step(ids[0], cache);
  const std::vector<float> after(logits, logits + config.vocab_size);
  ZayaModel fresh(params, cpu_ops());
  DecodeCache fresh_cache = make_decode_cache(params.dims(), 8);
  const float* expected = fresh.decode_step(ids[0], fresh_cache);
  EXPECT_EQ(std::memcmp(after.data(), expected, after.size() * sizeof(float)), 0);
}

// The tiny model at initialisation with two sequences of 17 random tokens.
struct TinyBatch {
  ZayaConfig config = tiny();
  ParameterStore params{model_dims(config)};
  std::vector<int32_t> ids = random_ids(2 * 17, config.vocab_size, 1);
  std::vector<int32_t> labels = shifted_labels(ids.data(), 2, 17);

  TinyBatch() { init_parameters(params, 0.02, 2); }
  Batch batch() const { return {ids.data(), labels.data(), nullptr, 2, 17}; }
};

TEST(ZayaModel, ForwardAloneGivesTheSameLossAndLeavesGradientsAlone) {
  TinyBatch tiny_batch;
  ParameterStore& params = tiny_batch.params;
  ZayaModel model(params, cpu_ops());
  params.zero_grads();
  const ForwardResult forward = model.forward(tiny_batch.batch(), true);
  const double inference = forward.loss_sum;
  const int64_t logits = 2 * 17 * tiny_batch.config.vocab_size;
  const std::vector<float> inference_logits(forward.logits, forward.logits + logits);
  for (int64_t i = 0; i < params.table().total_floats(); ++i) ASSERT_EQ(params.grads()[i], 0.0f);
  const ForwardResult trained = model.forward_backward(tiny_batch.batch(), 1.0f, true);
  EXPECT_EQ(inference, trained.loss_sum);
  EXPECT_EQ(std::memcmp(inference_logits.data(), trained.logits, size_t(logits) * sizeof(float)), 0);
  // At initialisation the model is close to uniform over the vocabulary.
  EXPECT_NEAR(inference / (2 * 16), std::log(double(tiny_batch.config.vocab_size)), 0.05);
}

// A forward-only pass keeps one layer's activations at a time: its memory does not grow with depth but for
// each layer's expert choices (kept for the caller), while a training pass keeps every layer's for backward.
TEST(ZayaModel, ForwardOnlyActivationsDoNotGrowWithDepth) {
  auto bytes = [](int64_t repeats, bool train) {
    ZayaConfig config = tiny();
    std::vector<std::string> types;
    for (int64_t r = 0; r < repeats; ++r)
      types.insert(types.end(), config.layer_types.begin(), config.layer_types.end());
    config.layer_types = types;
    config.num_hidden_layers = int64_t(types.size());
    ParameterStore params(model_dims(config));
    init_parameters(params, 0.02, 2);
    const std::vector<int32_t> ids = random_ids(2 * 17, config.vocab_size, 1);
    const std::vector<int32_t> labels = shifted_labels(ids.data(), 2, 17);
    ZayaModel model(params, cpu_ops());
    const Batch batch{ids.data(), labels.data(), nullptr, 2, 17};
    train ? model.forward_backward(batch, 1.0f) : model.forward(batch);
    return int64_t(model.activation_bytes());
  };
  const int64_t added_layers = 4, choices = added_layers * 2 * 17 * int64_t(sizeof(int32_t));
  EXPECT_LE(bytes(3, false) - bytes(1, false), choices + int64_t(kAlignment));
  EXPECT_GT(bytes(3, true) - bytes(1, true), 10 * (choices + int64_t(kAlignment)));
}

// Serving, scoring and validation alternate forward-only passes (rewound after each layer) with other passes:
// once each kind has run, neither makes a system allocation again.
TEST(ZayaModel, ForwardOnlyPassesAllocateNothingAfterWarmUp) {
  TinyBatch tiny_batch;
  ZayaModel model(tiny_batch.params, cpu_ops());
  model.forward(tiny_batch.batch());
  model.forward_backward(tiny_batch.batch(), 1.0f);
  model.forward(tiny_batch.batch());
  const size_t warmed_up = model.arena_allocations();
  for (int i = 0; i < 3; ++i) {
    model.forward(tiny_batch.batch());
    model.forward_backward(tiny_batch.batch(), 1.0f);
  }
  EXPECT_EQ(model.arena_allocations(), warmed_up);
}

// Serving, scoring and generating run forward only: the store then never allocates its gradients (as much
// memory as the f32 values). The first training pass allocates them, with or without zero_grads before it,
// and both orders give the same bits.
TEST(ZayaModel, HoldsGradientsOnlyOnceItTrains) {
  TinyBatch lazy, eager;
  ZayaModel lazy_model(lazy.params, cpu_ops()), eager_model(eager.params, cpu_ops());
  lazy_model.forward(lazy.batch());
  EXPECT_FALSE(lazy.params.holds_grads());
  lazy_model.forward_backward(lazy.batch(), 1.0f);
  ASSERT_TRUE(lazy.params.holds_grads());
  eager.params.zero_grads();
  eager_model.forward_backward(eager.batch(), 1.0f);
  const size_t bytes = size_t(lazy.params.table().total_floats()) * sizeof(float);
  EXPECT_EQ(std::memcmp(lazy.params.grads(), eager.params.grads(), bytes), 0);
  EXPECT_NE(std::count(lazy.params.grads(), lazy.params.grads() + bytes / sizeof(float), 0.0f),
            int64_t(bytes / sizeof(float)))
      << "the pass wrote gradients";
}

// The host reads a device value only through Ops::read_to_host, and a step does so once: for the loss
// with the router statistics (the experts' products find their rows on the device), and once for the
// optimizer's gradient norm.
TEST(ZayaModel, ReadsDeviceValuesOncePerPass) {
  TinyBatch tiny_batch;
  ParameterStore& params = tiny_batch.params;
  ZayaModel model(params, cpu_ops());
  Optimizer optimizer(params, {}, cpu_ops());
  const int64_t layers = params.dims().layers;
  int64_t before = cpu_ops().host_reads();
  model.forward(tiny_batch.batch());
  EXPECT_EQ(cpu_ops().host_reads() - before, 1);
  before = cpu_ops().host_reads();
  params.zero_grads();
  const ForwardResult result = model.forward_backward(tiny_batch.batch(), 1.0f);
  EXPECT_EQ(cpu_ops().host_reads() - before, 1);
  int64_t routed = 0;  // what was read is the step's: every token was counted on one route
  for (const RouterLayerStats& stats : *result.routing) {
    for (int64_t count : stats.counts) routed += count;
  }
  EXPECT_EQ(routed, layers * 2 * 17);
  before = cpu_ops().host_reads();
  optimizer.step(1.0);
  EXPECT_EQ(cpu_ops().host_reads() - before, 1);
  model.set_recompute(Recompute::Layer);
  before = cpu_ops().host_reads();
  model.forward_backward(tiny_batch.batch(), 1.0f);
  EXPECT_EQ(cpu_ops().host_reads() - before, 1);
}

TEST(ZayaModel, RejectsTokensOutsideTheVocabulary) {
  const ZayaConfig config = tiny();
  ParameterStore params(model_dims(config));
  ZayaModel model(params, cpu_ops());
  std::vector<int32_t> ids = {1, 2, int32_t(config.vocab_size)};
  EXPECT_THROW(model.forward({ids.data(), nullptr, nullptr, 1, 3}), Error);
  ids[2] = -1;
  EXPECT_THROW(model.forward({ids.data(), nullptr, nullptr, 1, 3}), Error);
}

// The published ZAYA1-base figures: 8.3B parameters of which 760M active, plus the 537M tied embedding.
TEST(ModelStats, Zaya1BaseCountsMatchTheArithmetic) {
  const ModelDims d = model_dims(preset_config("zaya1-base"));
  const int64_t H = 2048, L = 40, q = 8 * 128, kv = 2 * 128, C = q + kv, R = 256, E = 16, I = 2048,
                V = 262272;
  const int64_t attention = H * q + H * kv + H * kv + q * H + (C * 2 + C) + (C * 128 * 2 + C) + 2;
  const int64_t router = (R * H + R) + (R * R + R) * 2 + R + (E + 1) * R;  // + router_states_scale below
  const int64_t experts = E * (2 * I * H + H * I);
  const int64_t norms_and_scales = 2 * H + 8 * H;
  const int64_t per_layer = attention + router + experts + norms_and_scales;
  const int64_t non_embedding = L * per_layer + (L - 1) * R + 3 * H;  // final norm, input scale and bias
  const ModelStats stats = model_stats(ParameterTable(d), d, 4096);
  EXPECT_EQ(stats.embedding, V * H);
  EXPECT_EQ(stats.non_embedding, non_embedding);
  EXPECT_EQ(stats.active_non_embedding, non_embedding - L * (E - 1) * 3 * I * H);
  EXPECT_NEAR(double(stats.non_embedding) / 1e9, 8.3, 0.05);
  EXPECT_NEAR(double(stats.active_non_embedding) / 1e9, 0.76, 0.01);
  EXPECT_NEAR(double(stats.total) / 1e9, 8.84, 0.01);
}

}  // namespace
}  // namespace zaya

namespace zaya {
namespace {

// The auxiliary router losses through the whole model: the gradient they add (with aux minus without)
// against a central difference of the aux loss along a random direction over one router's parameters.
TEST(ZayaModel, AuxiliaryRouterLossGradientsMatchFiniteDifferences) {
  const ZayaConfig config = tiny();
  ParameterStore params(model_dims(config));
  init_parameters(params, 0.02, 6);
  const RandomStream rng(8, RngPurpose::Test, 0);
  std::vector<const ParamInfo*> router;
  for (const ParamInfo& p : params.table().params()) {
    if (p.layer != 1 || p.name.find("mlp.gate.") == std::string::npos || !p.trainable()) continue;
    router.push_back(&p);
    float* v = params.value(p);
    for (int64_t i = 0; i < p.numel(); ++i)
      v[i] += 0.3f * rng.normal(uint64_t(p.offset + i));  // decisive routing
  }
  const std::vector<int32_t> ids = random_ids(2 * 24, config.vocab_size, 3);
  const std::vector<int32_t> labels = shifted_labels(ids.data(), 2, 24);
  const Batch batch{ids.data(), labels.data(), nullptr, 2, 24};
  const float scale = 1.0f / 46.0f;
  ZayaModel model(params, cpu_ops());

  auto router_grads = [&](const RouterAuxLoss& aux) {
    model.set_router_aux_loss(aux);
    params.zero_grads();
    model.forward_backward(batch, scale);
    std::vector<float> out;
    for (const ParamInfo* p : router) out.insert(out.end(), params.grad(*p), params.grad(*p) + p->numel());
    return out;
  };
  const RouterAuxLoss aux{1.0f, 0.1f};
  const std::vector<float> with = router_grads(aux), without = router_grads({});
  // A unit direction, so that a small step moves the router's outputs by little and flips no routing choice.
  std::vector<float> direction(with.size());
  double norm = 0, analytic = 0;
  for (size_t i = 0; i < with.size(); ++i) {
    direction[i] = rng.normal(1000000 + i);
    norm += double(direction[i]) * direction[i];
  }
  for (size_t i = 0; i < with.size(); ++i) {
    direction[i] = float(direction[i] / std::sqrt(norm));
    analytic += double(with[i] - without[i]) * direction[i];
  }
  model.set_router_aux_loss(aux);
  auto aux_loss_at = [&](double step) {
    size_t k = 0;
    for (const ParamInfo* p : router) {
      for (int64_t i = 0; i < p->numel(); ++i) params.value(*p)[i] += float(step) * direction[k++];
    }
    const double value = model.forward(batch).aux_loss_sum * scale;
    k = 0;
    for (const ParamInfo* p : router) {
      for (int64_t i = 0; i < p->numel(); ++i) params.value(*p)[i] -= float(step) * direction[k++];
    }
    return value;
  };
  const double h = 1e-2;
  const double numeric = (aux_loss_at(h) - aux_loss_at(-h)) / (2 * h);
  EXPECT_GT(std::abs(analytic), 1e-3);
  EXPECT_NEAR(analytic, numeric, 0.02 * std::abs(numeric));
}

}  // namespace
}  // namespace zaya

namespace zaya {
namespace {

// Token by token with the decode state equals the full causal pass, on the fixtures' odd shapes
// (convolution kernels 3 and 2, windows, attention and LM-head biases, groups of 4 and of 1).
TEST(ZayaModel, IncrementalDecodingMatchesTheFullPass) {
  for (const char* name : {"odd", "mha_window", "basic"}) {
    LoadedModel loaded = load_model(test::fixture(std::string("model/") + name));
    const ModelDims& dims = loaded.params->dims();
    const int64_t S = 14;
    const std::vector<int32_t> ids = random_ids(S, dims.vocab, 11);
    ZayaModel model(*loaded.params, cpu_ops());
    const ForwardResult full = model.forward({ids.data(), nullptr, nullptr, 1, S}, true);
    const std::vector<float> want(full.logits, full.logits + S * dims.vocab);
    double scale = 0;
    for (float v : want) scale = std::max(scale, double(std::abs(v)));

    DecodeCache cache = make_decode_cache(dims, S);
    double worst = 0;
    for (int64_t t = 0; t < S; ++t) {
      const float* logits = model.decode_step(ids[size_t(t)], cache);
      for (int64_t v = 0; v < dims.vocab; ++v)
        worst = std::max(worst, double(std::abs(logits[v] - want[size_t(t * dims.vocab + v)])));
    }
    EXPECT_LE(worst, 1e-4 * scale) << name;
    EXPECT_THROW(model.decode_step(ids[0], cache), Error);  // full
  }
}

// The serving path: sequences at different positions decoded together (decode_batch), some of them started
// from a prefill over their prompt, give each sequence the logits of its own full pass. The fixtures'
// windows and kernels make the positions matter.
TEST(ZayaModel, BatchedDecodingAndPrefillMatchEachSequencesFullPass) {
  for (const char* name : {"odd", "mha_window", "basic"}) {
    LoadedModel loaded = load_model(test::fixture(std::string("model/") + name));
    const ModelDims& dims = loaded.params->dims();
    const int64_t V = dims.vocab, S = 12, B = 3;
    ZayaModel model(*loaded.params, cpu_ops());
    std::vector<std::vector<int32_t>> ids;
    std::vector<std::vector<float>> want;
    double scale = 0;
    for (int64_t b = 0; b < B; ++b) {
      ids.push_back(random_ids(S, V, uint64_t(20 + b)));
      const ForwardResult full = model.forward({ids.back().data(), nullptr, nullptr, 1, S}, true);
      want.emplace_back(full.logits, full.logits + S * V);
      for (float v : want.back()) scale = std::max(scale, double(std::abs(v)));
    }
    // Sequence b starts with a prefill of its first `prompt[b]` tokens (none for sequence 0, which is fed
    // token by token); then all three advance one token per batched step, each from its own position.
    // prompt[1] is the longest, the padded length of the joint prefill.
    const int64_t prompt[B] = {0, 5, 1};
    std::vector<DecodeCache> caches;
    double worst = 0;
    auto compare = [&](int64_t b, int64_t position, const float* logits) {
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst, double(std::abs(logits[v] - want[size_t(b)][size_t(position * V + v)])));
    };
    for (int64_t b = 0; b < B; ++b) caches.push_back(make_decode_cache(dims, S));
    // Sequences 1 and 2 prefilled together (padded to 5), as zaya serve admits several at once.
    const int32_t* prompts[] = {ids[1].data(), ids[2].data()};
    DecodeCache* prefilled[] = {&caches[1], &caches[2]};
    const float* logits = model.prefill(prompts, prompt + 1, prefilled, 2);
    for (int64_t b = 1; b < B; ++b) {
      for (int64_t t = 0; t < prompt[b]; ++t) compare(b, t, logits + ((b - 1) * prompt[1] + t) * V);
    }
    // Only the last positions' logits, [2, V], into fresh caches: the same rows, and the same caches after.
    std::vector<DecodeCache> again;
    for (int64_t b = 1; b < B; ++b) again.push_back(make_decode_cache(dims, S));
    DecodeCache* again_ptrs[] = {&again[0], &again[1]};
    const float* last = model.prefill(prompts, prompt + 1, again_ptrs, 2, ZayaModel::PrefillLogits::Last);
    for (int64_t b = 1; b < B; ++b) compare(b, prompt[b] - 1, last + (b - 1) * V);
    for (int64_t b = 1; b < B; ++b) {
      EXPECT_EQ(again[size_t(b - 1)].length, caches[size_t(b)].length) << name;
      const AlignedBuffer &keys = again[size_t(b - 1)].layers[0].keys,
                          &before = caches[size_t(b)].layers[0].keys;
      EXPECT_EQ(std::memcmp(keys.data(), before.data(), keys.size()), 0) << name;
    }
    for (;;) {
      std::vector<int32_t> tokens;
      std::vector<DecodeCache*> active;
      std::vector<int64_t> which;
      for (int64_t b = 0; b < B; ++b) {
        const int64_t position = caches[size_t(b)].length;
        if (position == S) continue;
        tokens.push_back(ids[size_t(b)][size_t(position)]);
        active.push_back(&caches[size_t(b)]);
        which.push_back(b);
      }
      if (active.empty()) break;
      const float* logits = model.decode_batch(tokens.data(), active.data(), int64_t(active.size()));
      for (size_t i = 0; i < which.size(); ++i)
        compare(which[i], active[i]->length - 1, logits + int64_t(i) * V);
    }
    EXPECT_LE(worst, 1e-4 * scale) << name;
    for (const DecodeCache& cache : caches) EXPECT_EQ(cache.length, S) << name;
    // A batch with one full cache is refused before any cache changes.
    DecodeCache fresh = make_decode_cache(dims, S);
    DecodeCache* both[] = {&fresh, &caches[0]};
    const int32_t two[] = {1, 1};
    EXPECT_THROW(model.decode_batch(two, both, 2), Error);
    EXPECT_EQ(fresh.length, 0);
    EXPECT_THROW(model.prefill(ids[0].data(), S, caches[0]), Error);  // not empty
    DecodeCache empty = make_decode_cache(dims, S);
    const std::vector<int32_t> longer = random_ids(S + 1, V, 30);
    EXPECT_THROW(model.prefill(longer.data(), S + 1, empty), Error);  // longer than the cache
  }
}

}  // namespace
}  // namespace zaya

namespace zaya {
namespace {

TEST(Sampling, TemperatureNucleusAndTopK) {
  const float logits[5] = {2.0f, 1.0f, 0.5f, -1.0f, 3.0f};
  auto rule = [](double temperature, double top_p, int64_t top_k = 0) {
    SamplingRule r;
    r.temperature = temperature;
    r.top_p = top_p;
    r.top_k = top_k;
    return r;
  };
  EXPECT_EQ(sample_token(logits, 5, rule(0.0, 1.0), 0.7), 4);  // greedy
  EXPECT_EQ(sample_token(logits, 5, rule(1.0, 1.0, 1), 0.7), 4);
  // top_p small enough: only the most likely token remains, whatever the draw.
  for (double draw : {0.0, 0.5, 0.999}) EXPECT_EQ(sample_token(logits, 5, rule(1.0, 0.1), draw), 4);
  // Full nucleus: draws sweep the tokens in order of probability.
  EXPECT_EQ(sample_token(logits, 5, rule(1.0, 1.0), 0.0), 4);
  EXPECT_EQ(sample_token(logits, 5, rule(1.0, 1.0), 0.9999), 3);
  // Frequencies follow the softmax; with top_k 2, the softmax of the two most likely.
  const RandomStream rng(1, RngPurpose::Test, 0);
  for (int64_t top_k : {0, 2}) {
    std::vector<int> counts(5, 0);
    for (int i = 0; i < 20000; ++i)
      ++counts[size_t(sample_token(logits, 5, rule(1.0, 1.0, top_k), rng.uniform_double(uint64_t(i))))];
    double total = 0;
    for (int k = 0; k < 5; ++k) total += (top_k == 0 || k == 0 || k == 4) ? std::exp(logits[k]) : 0.0;
    for (int k = 0; k < 5; ++k) {
      const double want = (top_k == 0 || k == 0 || k == 4) ? std::exp(logits[k]) / total : 0.0;
      EXPECT_NEAR(counts[size_t(k)] / 20000.0, want, 0.015) << "top_k " << top_k << " token " << k;
    }
  }
}

// What sample_token computes, by its definition: every token ranked (logit descending, ties by id), the
// nucleus the shortest prefix holding top_p of the total weight (at most top_k long), and the draw's token
// where the running weight passes draw times the nucleus's. The weights are sample_token's own, exp((z -
// max) / T) in f32, so that the two differ only in the order of their double sums.
int32_t sample_by_sorting(const std::vector<float>& logits, const SamplingRule& rule, double draw) {
  const int64_t vocab = int64_t(logits.size());
  const float max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> weights;
  for (float z : logits) weights.push_back(vexp((z - max) * float(1.0 / rule.temperature)));
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return logits[size_t(a)] != logits[size_t(b)] ? logits[size_t(a)] > logits[size_t(b)] : a < b;
  });
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  const size_t candidates = size_t(rule.top_k > 0 ? std::min(rule.top_k, vocab) : vocab);
  double kept = 0;
  size_t nucleus = 0;
  while (nucleus < candidates && (nucleus == 0 || kept < rule.top_p * total))
    kept += weights[size_t(order[nucleus++])];
  double target = draw * kept;
  for (size_t i = 0; i < nucleus; ++i) {
    target -= weights[size_t(order[i])];
    if (target < 0) return order[i];
  }
  return order[nucleus - 1];
}

// sample_token ranks tokens in bins of logit and sorts only the bins a draw stops in: it must choose what a
// full sort chooses, for nuclei and top_k cut inside a bin or at its edge, temperatures that spread the
// weight or sharpen it, and logits repeated exactly (ties by id) and spread over more than its 1024 bins.
TEST(Sampling, BinnedRankingChoosesWhatAFullSortChooses) {
  const int64_t vocab = 5000;
  const RandomStream rng(2, RngPurpose::Test, 0);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) logits[size_t(i)] = float(4.0 * rng.normal(uint64_t(i)));
  // Exact ties, among the most likely tokens, where most draws land (and the first top_k cut falls).
  const float top = *std::max_element(logits.begin(), logits.end());
  for (int64_t i = 0; i < 40; ++i) logits[size_t(i * 97)] = top - 0.5f;
  logits[11] = -90.0f;  // past the last bin
  for (const auto& [temperature, top_p, top_k] : {std::tuple{1.0, 1.0, int64_t(0)},
                                                  {1.0, 0.9, 0},
                                                  {0.7, 0.5, 0},
                                                  {2.0, 0.99, 20},
                                                  {1.0, 1.0, 300},
                                                  {0.05, 0.95, 0},
                                                  {5.0, 0.3, 0}}) {
    SamplingRule rule;
    rule.temperature = temperature, rule.top_p = top_p, rule.top_k = top_k;
    for (int i = 0; i < 400; ++i) {
      const double draw = rng.uniform_double(uint64_t(1000 + i));
      EXPECT_EQ(sample_token(logits.data(), vocab, rule, draw), sample_by_sorting(logits, rule, draw))
          << "T " << temperature << ", top_p " << top_p << ", top_k " << top_k << ", draw " << draw;
    }
  }
}

// Logits a broken model could produce still give a token of the vocabulary: NaNs rank last with no weight,
// and a row without a finite weight falls back to the most likely token.
TEST(Sampling, NonFiniteLogitsGiveATokenOfTheVocabulary) {
  const float nan = std::nanf(""), inf = __builtin_inff();
  SamplingRule rule;
  rule.temperature = 1.0, rule.top_p = 1.0;
  const float some_nan[4] = {nan, 1.0f, nan, 0.5f};
  for (double draw : {0.0, 0.5, 0.999}) {
    const int32_t token = sample_token(some_nan, 4, rule, draw);
    EXPECT_TRUE(token == 1 || token == 3) << draw;
  }
  const float all_nan[3] = {nan, nan, nan}, all_low[3] = {-inf, -inf, -inf}, high[3] = {0.0f, inf, 1.0f};
  EXPECT_EQ(sample_token(all_nan, 3, rule, 0.5), 0);
  EXPECT_EQ(sample_token(all_low, 3, rule, 0.5), 0);
  EXPECT_EQ(sample_token(high, 3, rule, 0.5), 1);
}

TEST(Generate, IsReproducibleAndStops) {
  const ZayaConfig config = tiny();
  ParameterStore params(model_dims(config));
  init_parameters(params, 0.5, 1);
  ZayaModel model(params, cpu_ops());
  const std::vector<int32_t> prompt = {5, 6, 7};
  SamplingOptions options;
  options.max_new_tokens = 12;
  options.seed = 3;
  std::vector<int32_t> streamed;
  const auto a = generate(model, prompt, options, [&](int32_t id) { streamed.push_back(id); });
  EXPECT_EQ(a.size(), 12u);
  EXPECT_EQ(a, streamed);
  EXPECT_EQ(generate(model, prompt, options), a);
  options.seed = 4;
  EXPECT_NE(generate(model, prompt, options), a);
  options.stop_token = a[2];
  options.seed = 3;
  EXPECT_LE(generate(model, prompt, options).size(), 3u);
  EXPECT_THROW(generate(model, {}, options), Error);
}

// Greedy tokens are the argmax of the full pass over the text so far: the prompt's one-pass prefill and each
// decode step after it agree with it.
TEST(Generate, GreedyTokensAreTheFullPassArgmax) {
  const ZayaConfig config = tiny();
  ParameterStore params(model_dims(config));
  init_parameters(params, 0.5, 1);
  ZayaModel model(params, cpu_ops());
  const int64_t V = params.dims().vocab;
  SamplingOptions options;
  options.max_new_tokens = 10;
  options.temperature = 0;
  const std::vector<int32_t> prompt = random_ids(9, V, 4);
  const std::vector<int32_t> got = generate(model, prompt, options);
  ASSERT_EQ(got.size(), 10u);
  std::vector<int32_t> text = prompt;
  for (int32_t token : got) {
    const ForwardResult full = model.forward({text.data(), nullptr, nullptr, 1, int64_t(text.size())}, true);
    const float* last = full.logits + (int64_t(text.size()) - 1) * V;
    EXPECT_EQ(token, int32_t(std::max_element(last, last + V) - last))
        << "after " << text.size() << " tokens";
    text.push_back(token);
  }
}

}  // namespace
}  // namespace zaya
