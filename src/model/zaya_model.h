#pragma once
// ZayaForCausalLM on a backend: explicit forward and backward passes over the parameter store, with every
// activation the backward pass needs kept in an arena sized by the first step (no allocation afterwards).
// A forward-only pass (inference, validation, prefill) keeps one layer's activations at a time.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "core/buffer.h"
#include "core/precision.h"
#include "model/decode_cache.h"
#include "model/parameters.h"
#include "model/recompute.h"
#include "model/weights.h"

namespace zaya {

class DeviceCommunicator;
class Ops;
struct AttentionShape;
struct ExpertExchange;
struct LayerActivations;
struct Operand;

inline constexpr int32_t kIgnoreLabel = -100;

struct Batch {
  const int32_t* input_ids = nullptr;     // [batch, seq]
  const int32_t* labels = nullptr;        // [batch, seq]: the target of each position, or kIgnoreLabel
  const float* attention_mask = nullptr;  // [batch, seq], 1 keep / 0 padding; null = no padding
  int64_t batch = 0, seq = 0;
  // Context parallelism (ZayaModel::set_context_group): the batch is this rank's slice of sequences that
  // the group's C ranks share, rank r of the group holding positions [r seq, (r + 1) seq) of each. Without
  // it (or a group) the sequences are whole.
  bool context_slice = false;
  int64_t tokens() const { return batch * seq; }
};

// transformers' convention for labels = input_ids: position s predicts input s + 1; the last predicts
// nothing.
std::vector<int32_t> shifted_labels(const int32_t* input_ids, int64_t batch, int64_t seq);

// Optional auxiliary router losses, for comparison with bias balancing (both off by default).
struct RouterAuxLoss {
  float switch_weight = 0;  // Switch Transformer load balancing: w * E * sum_e f_e * mean_t p_te, per layer
  float z_weight = 0;       // router z-loss: w * mean_t lse_t^2, per layer
  bool enabled() const { return switch_weight != 0 || z_weight != 0; }
};

// What the router did in one layer over one batch.
struct RouterLayerStats {
  std::vector<int64_t> counts;    // [routes] tokens per route (the last is skip)
  std::vector<double> prob_sums;  // [routes] sum over tokens of the route's probability
  double entropy_sum = 0;         // sum over tokens of -sum_e p log p
  double lse_square_sum = 0;      // sum over tokens of the logits' log-sum-exp squared
};

// The most logits one forward pass that keeps them should hold (floats: 256 MiB); callers that score many
// sequences (zaya eval, zaya serve's prefill) size their passes by it.
inline constexpr int64_t kLogitsPerPass = int64_t(1) << 26;

struct ForwardResult {
  double loss_sum = 0;                     // summed cross-entropy over the labelled positions
  int64_t labelled = 0;                    // how many positions had a label
  double aux_loss_sum = 0;                 // the auxiliary router losses, summed over tokens and layers
  const float* logits = nullptr;           // [tokens, vocab] when asked for; valid until the next call
  const int32_t* expert_choice = nullptr;  // [layers, tokens]; experts (= the skip route's index) for skip
  const std::vector<RouterLayerStats>* routing = nullptr;  // per layer; valid until the next call
  double mean_loss() const { return labelled ? loss_sum / double(labelled) : 0.0; }
};

class ZayaModel {
 public:
  // precision: of the attention, expert and head products (docs/TRAINING.md). With bf16 the model keeps
  // bf16 copies of those weight matrices, made here and by weights_changed(), except the expert weights of a
  // store that holds them in bf16 itself (ExpertValues::Bf16: then bf16 is the only precision, and the model
  // runs forward only).
  ZayaModel(ParameterStore& params, Ops& ops, Precision precision = Precision::F32);
  ~ZayaModel();

  Precision precision() const { return precision_; }
  // Call after writing the store's values (the optimizer step): refreshes the bf16 copies.
  void weights_changed();

  // Inference: loss (when labels are given) and optionally the logits.
  ForwardResult forward(const Batch& batch, bool keep_logits = false);
  // Training: forward, then backward of loss_scale * loss_sum, accumulated into params().grads().
  ForwardResult forward_backward(const Batch& batch, float loss_scale, bool keep_logits = false);

  void set_router_aux_loss(const RouterAuxLoss& aux) { aux_ = aux; }
  void set_recompute(Recompute recompute) { recompute_ = recompute; }
  // Expert parallelism: the group's ranks share each layer's experts (rank p of P holds, in a store built
  // for that ExpertSlice, and runs experts [p E / P, (p + 1) E / P)), and forward and forward_backward send
  // every routed token to the rank of its expert and its result back (all-to-all). Every rank of the group
  // must make the same sequence of calls (batches may differ). decode_step needs every expert on one rank.
  // Null: all local. Throws Error when the group's size does not divide the experts or the store does not
  // hold this rank's experts.
  void set_expert_group(DeviceCommunicator* group);
  // Context parallelism (model/context_parallel.cpp): the group's ranks share each sequence of a batch
  // marked context_slice, one consecutive slice each; every rank of the group must make the same sequence
  // of such calls, with slices of the same size. Batches not so marked run whole. Null: none. Throws Error
  // unless the group's size divides the attention heads in whole key-value groups (or within one).
  void set_context_group(DeviceCommunicator* group);
  // Called in forward_backward once each decoder layer's backward has added all of that layer's gradients
  // (layers last to first), so that their data-parallel reduction can start there. Empty: none.
  void set_layer_backward_hook(std::function<void(int64_t layer)> hook) {
    layer_backward_hook_ = std::move(hook);
  }
  // Context parallelism's exchanges since the last reset: seconds in them (waiting for the group's slowest
  // rank included; with NCCL/RCCL, which return once the exchange is queued, the queueing) and the bytes this
  // rank sent to the others.
  struct ExchangeTally {
    double seconds = 0;
    int64_t bytes = 0;
  };
  const ExchangeTally& context_exchange() const { return context_exchange_; }
  void reset_context_exchange() { context_exchange_ = {}; }
  // A new RoPE base for every layer (a training stage may extend the context this way).
  void set_rope_theta(double theta) {
    for (LayerDims& layer : dims_.layer) layer.rope_theta = theta;
  }
  // Generation (on any backend; the caches in its memory, made with make_decode_cache(dims, capacity,
  // ops().memory())): feeds one token at position cache.length and returns the next token's logits ([vocab],
  // in host memory, valid until the next call). Equal to the full forward pass's logits at that position.
  // Throws Error when the cache is full or the token is outside the vocabulary.
  const float* decode_step(int32_t token, DecodeCache& cache);
  // Continuous batching: feeds tokens[i] to *caches[i], each at its own position, for `count` sequences
  // decoded together (their matrix products and experts as one batch of rows, in this model's precision),
  // and returns their next tokens' logits [count, vocab]. Throws Error (before changing any cache) as
  // decode_step does.
  const float* decode_batch(const int32_t* tokens, DecodeCache* const* caches, int64_t count);
  // Which logits a prefill returns: every position's (to score the prompt), or only the last position's (to
  // start decoding; the head's product skips the others, 40% of the FLOPs of a 32-token prompt on medium).
  enum class PrefillLogits { Every, Last };
  // A prompt through the full forward pass (in this model's precision) into an empty cache, which then
  // continues with decode_step as if the prompt had been fed to it token by token. Returns the logits of
  // every position [count, vocab], or of the last [vocab], in host memory, valid until the next call.
  const float* prefill(const int32_t* tokens, int64_t count, DecodeCache& cache,
                       PrefillLogits which = PrefillLogits::Every);
  // Several prompts in one pass (right-padded to the longest), each into its own empty cache: the weights are
  // read once for all of them. Every: logits [count, longest, vocab], prompt b's position t at row
  // b * longest + t. Last: [count, vocab], each prompt's last position.
  const float* prefill(const int32_t* const* prompts, const int64_t* lengths, DecodeCache* const* caches,
                       int64_t count, PrefillLogits which = PrefillLogits::Every);

  // logits [rows, vocab] of this model's where the host reads them: themselves on the CPU, else copied
  // into host memory the model keeps until the next call (one host read).
  const float* host_logits(const float* logits, int64_t rows);

  ParameterStore& params() { return params_; }
  Ops& ops() { return ops_; }  // the backend it runs on
  // System allocations made by the model's arenas so far: constant once the step shape has been seen.
  size_t arena_allocations() const {
    return arena_.system_allocations() + recomputed_.system_allocations() + scratch_.system_allocations();
  }
  // The most bytes of activations one pass has kept so far (the activation arena's high-water mark), and of
  // one layer's recomputed ones (with recompute).
  size_t activation_bytes() const { return arena_.high_water(); }
  size_t recomputed_bytes() const { return recomputed_.high_water(); }
  // The most bytes of scratch (values an op or a layer needs only while it runs) one pass has held so far.
  size_t scratch_bytes() const { return scratch_.high_water(); }
  // Sizes the arenas before the first pass (from a plan: train/memory_plan.h), so that no pass grows them:
  // the first step then holds no more than every later one.
  void reserve_arenas(size_t activations, size_t recomputed, size_t scratch) {
    arena_.reserve(activations);
    recomputed_.reserve(recomputed);
    scratch_.reserve(scratch);
  }

 private:
  // Called after each decoder layer's forward with what it computed (in a forward-only pass, valid only
  // during the call: the next layer reuses that memory).
  using LayerCallback = std::function<void(int64_t layer, const LayerActivations& a)>;
  ForwardResult run(const Batch& host_batch, bool keep_logits, bool train, float loss_scale,
                    const LayerCallback& after_layer = {});
  // A copy of count host values in the activation arena (the backend's memory); null stays null.
  template <class T>
  T* to_device(const T* host, int64_t count);
  // choice: [T] of expert_choice_; router_state: [T, R] (a.rh), which the next layer reads.
  // A layer's activations: those of its attention block, and the rest (its router state and expert choices
  // given, as they outlive the layer's recomputation), in `arena`.
  void allocate_attention(LayerActivations& a, const Batch& batch, Arena& arena);
  void allocate_rest(LayerActivations& a, const Batch& batch, int32_t* choice, float* router_state,
                     Arena& arena);
  // The activations recompute_ leaves to the backward pass, in recomputed_ (which it empties first).
  void allocate_recomputed(int64_t layer, const Batch& batch);
  // One decoder layer forward, from a.x_in (and the previous layer's router state) to x_out.
  void layer_forward(int64_t layer, const Batch& batch, LayerActivations& a, float* x_out);
  // Throws Error unless the tokens are in the vocabulary, the cache has room for them and this rank holds
  // every expert.
  void require_decodable(const int32_t* tokens, int64_t count, const DecodeCache& cache) const;
  // Decoding one token of each of B sequences, in layer l: q and k before their norms ([B, QD] a.q_pre,
  // [B, KD] a.k_pre) from the convolution over each cache's kept rows and this one, and the values ([B, KD]
  // a.v): this token's current half, and the delayed half the cache kept. Moves each cache's kept rows and
  // delayed values on by this token.
  void decode_qkv(int64_t l, DecodeCache* const* caches, int64_t B, LayerActivations& a);
  // The logits [count, vocab] of each prompt's last position in the pass prefill just ran (rows
  // b * longest + lengths[b] - 1 of its final hidden states), in the arena.
  const float* last_logits(const int64_t* lengths, int64_t count, int64_t longest);
  // A product's input read by more than one product: in bf16 runs rounded once into `arena` (the operand the
  // products read as it is, without rounding it each), in fp32 x itself.
  Operand product_input(const float* x, int64_t count, Arena& arena);
  // Room in `arena` for an activation that products read next, written by the op that makes it: bf16 in
  // bf16 runs (rounded as it is written, no f32 copy), else f32.
  Destination product_activation(int64_t count, Arena& arena);
  // The step's sums on the device (the loss, each layer's router statistics): zeroed at the start of a
  // forward, read to the host in one call at its end.
  void reset_step_sums();
  // The auxiliary loss's route counts, of the whole batch: under context parallelism, summed over the
  // group's slices (a host collective).
  void sum_batch_route_counts(const Batch& batch);
  int64_t batch_route_count(int64_t layer, int64_t route) const {
    return batch_route_counts_[size_t(layer * dims_.routes() + route)];
  }
  // Throws Error for a slice the context-parallel ops cannot take (padding, shorter than the halo).
  void check_slice(const Batch& batch) const;
  void read_step_sums(ForwardResult& result);
  // Per layer in step_sums_, from layer_sums_offset: route counts (int64) [routes], probability sums
  // [routes], entropy, lse^2.
  int64_t layer_sums() const { return 2 * dims_.routes() + 2; }
  int64_t layer_sums_offset(int64_t layer) const { return 1 + layer * layer_sums(); }
  double* layer_step_sums(int64_t layer) { return step_sums_.as<double>() + layer_sums_offset(layer); }
  // cos and sin [count, rotary_dim / 2] of one layer's rotary embedding at the given positions (null: 0 to
  // count - 1), into arena memory.
  void rope_rows(int64_t layer, const int64_t* positions, int64_t count, float*& cos, float*& sin);
  void embed(const Batch& batch, float* out);
  void attention_forward(int layer, const Batch& batch, LayerActivations& a);
  void attention_backward(int layer, const Batch& batch, LayerActivations& a, float* d_attn, float* d_x);
  void moe_forward(int layer, const Batch& batch, LayerActivations& a, const float* prev_router_state);
  // d_state_next: the gradient of this layer's router state from the next layer (null for the last);
  // d_state_prev receives the gradient of the previous layer's router state (null for layer 0).
  void moe_backward(int layer, const Batch& batch, LayerActivations& a, const float* d_moe,
                    const float* d_state_next, float* d_xn2, float* d_state_prev);
  // The experts over the routed rows x [N, H] (grouped by expert): into a.gate_up, a.act, a.y here, or on
  // the experts' ranks (model/expert_parallel.cpp). Backward: from d_y [N, H] (times the gate), the
  // experts' gradients and d_x [N, H].
  bool expert_parallel() const { return expert_group_ != nullptr; }
  int64_t expert_rows(LayerActivations& a, int64_t tokens);
  void require_experts_reachable() const;  // throws Error for a store of some experts without a group
  void experts_forward_parallel(int layer, LayerActivations& a, const float* x);
  void experts_backward_parallel(int layer, const float* d_y, float* d_x);
  // Context parallelism. A batch this pass splits over the context group:
  bool sliced(const Batch& batch) const;
  // Positions before a slice that the convolutions read: (k0 - 1) + (k1 - 1).
  int64_t context_halo() const;
  // Which heads (of `heads`) each rank of the context group attends over: first[j], count[j] for rank j.
  struct HeadSplit {
    std::vector<int64_t> first, count;
    int64_t heads = 0;
  };
  HeadSplit head_split(int ranks, bool kv) const;
  // The attention over whole sequences of this rank's heads, for a slice's shape.
  AttentionShape heads_shape(AttentionShape shape) const;
  // The last `rows` rows of each sequence's slice of x [B, L, n] (row stride ld) from the previous rank
  // into halo [B, rows, n] (zeros on the group's first rank, as the padding before a sequence).
  void halo_forward(const float* x, int64_t ld, int64_t n, int64_t rows, const Batch& batch, float* halo);
  // Their gradient: d_halo [B, rows, n] goes to the previous rank, the next rank's is added to the last
  // `rows` rows of each sequence's slice of dx [B, L, n] (row stride ld).
  void halo_backward(const float* d_halo, int64_t n, int64_t rows, const Batch& batch, float* dx, int64_t ld);
  // x [B, L, heads, D] (this rank's slice of every head) -> out [B, S, this rank's heads, D] (whole
  // sequences of its heads), and back: y [B, S, this rank's heads, D] -> x [B, L, heads, D], summed over
  // the ranks that share a head.
  void to_heads(const float* x, const HeadSplit& split, const Batch& batch, float* out);
  void from_heads(const float* y, const HeadSplit& split, const Batch& batch, float* x);
  // The context group's all-to-all, timed and counted in context_exchange_.
  void context_all_to_all(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                          const std::vector<int64_t>& recv_counts);
  // The LM head and the loss over chunks of tokens; with train, the head's backward is fused in and the
  // gradient of the final norm's output lands in d_final.
  void head(const Batch& batch, const float* final_hidden, bool keep_logits, bool train, float loss_scale,
            float* logits, float* d_final);
  void backward(const Batch& batch, float* d_final);
  void rope_tables(const Batch& batch);

  ParameterStore& params_;
  Ops& ops_;
  ModelDims dims_;
  Precision precision_;
  ModelWeights w_, g_;  // values and gradients (g_ bound at the first training pass; null before)
  // bf16 runs: [total_floats] bf16 (or [dense_floats] over a store of bf16 experts), the product matrices'
  // copies at the store's offsets (the rest unused).
  AlignedBuffer copies_;
  ModelMatrices m_;   // the product matrices as the products read them
  Arena arena_;       // activations: reset at the start of each forward
  Arena recomputed_;  // with recompute, the activations of the one layer computed (again) now
  Recompute recompute_ = Recompute::None;
  bool recomputing_ = false;  // the backward pass is computing a layer's forward again
  // Where the attention block's and the rest of a layer's own activations go in this pass (the product
  // inputs and the expert exchange included): arena_, or recomputed_ for what recompute_ names.
  Arena* attention_arena_ = &arena_;
  Arena* moe_arena_ = &arena_;
  Arena scratch_;  // temporaries of one layer's forward or backward: rewound after each
  std::vector<LayerActivations> layers_;
  std::vector<RouterLayerStats> routing_;    // the host's copy of the router statistics, per layer
  AlignedBuffer step_sums_;                  // [1 + layers * layer_sums()] doubles: the loss, then per layer
  std::vector<double> host_sums_;            // step_sums_ read to the host
  std::vector<int64_t> batch_route_counts_;  // [layers, routes], sum_batch_route_counts's
  int64_t batch_tokens_ = 0;                 // the tokens those were counted over
  // Host values on their way to the backend's memory (RoPE tables, aux coefficients); capacity kept.
  std::vector<float> staging_;
  std::vector<float> host_logits_;  // host_logits's copy
  RouterAuxLoss aux_;
  DeviceCommunicator* expert_group_ = nullptr;
  DeviceCommunicator* context_group_ = nullptr;
  ExchangeTally context_exchange_;
  HeadSplit query_heads_, kv_heads_;                // set_context_group's, over its ranks
  std::vector<int64_t> send_counts_, recv_counts_;  // the context exchanges' counts; capacity kept
  std::vector<ExpertExchange> exchanges_;           // per layer, with an expert group
  std::function<void(int64_t)> layer_backward_hook_;
  bool training_ = false;  // the current pass is forward_backward's
  float loss_scale_ = 0;
  float* x_embed_ = nullptr;  // [tokens, hidden], the embedding output
  float* x_final_ = nullptr;  // [tokens, hidden], the last layer's output
  float* rstd_final_ = nullptr;
  float* xn_final_ = nullptr;
  int32_t* expert_choice_ = nullptr;
  std::vector<float*> rope_cos_, rope_sin_;  // per layer, [seq, rotary_dim / 2]
  // The host's cos and sin [positions, rotary_dim / 2] of every position asked for so far, per distinct
  // (rotary_dim, rope_theta) of the layers: each computed once, where a decode step of 8 sequences spent
  // 0.2 ms of libm calls recomputing them.
  struct RopeAngles {
    int64_t rotary_dim = 0;
    double theta = 0;
    std::vector<float> cos, sin;
  };
  std::vector<RopeAngles> rope_angles_;
};

}  // namespace zaya
