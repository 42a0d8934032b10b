// The backend op table, written once: every op as ZAYA_OP(name, (parameters), (arguments)), grouped by
// family. No include guard, on purpose: a file defines ZAYA_OP (and, if it wants the sections,
// ZAYA_FAMILY) and includes this list to generate what it needs from it: the pure virtual members of Ops
// and the op names (ops.h), the overrides of each backend (cpu_ops.h, gpu_ops.h), the profiler's
// forwarding (op_profiler.cpp). Both macros are undefined at the end.
//
// Each family is one file in every place an op is written: backend/cpu/<family>.cpp,
// backend/gpu/<family>.cu and backend/op_check/<family>.cpp (its calls in `zaya bench ops`).
//
// Every op writes its results through its pointers and returns nothing; a Destination is written in f32 or
// bf16, as the caller gives it. Conventions (row-major, T, what "accumulate" means) are in ops.h.

#ifndef ZAYA_FAMILY
#define ZAYA_FAMILY(name)
#endif

// ---- products: matrix products, the rounding of their bf16 operands, and the linear layers' biases ----
ZAYA_FAMILY(products)
// C[m,n] = alpha * op(A) @ op(B) + beta * C; op(A) is [m,k], op(B) is [k,n]; C is f32. With
// Precision::BF16 the inputs are rounded to bf16 (f32 operands by the op itself, bf16 ones as they are)
// and the sums are f32; with Precision::F32 both operands must be f32 and the product is f32 throughout.
ZAYA_OP(gemm,
        (Precision precision, Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k, float alpha,
         Operand a, int64_t lda, Operand b, int64_t ldb, float beta, float* c, int64_t ldc),
        (precision, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
// The experts' products, grouped by the device's offsets [groups + 1] (as group_by_expert writes them) with
// no host reading them: group g owns rows offsets[g] .. offsets[g + 1] of A [rows, k] and C [rows, n], and
// C's rows of g = A's rows of g @ op(B_g), B_g = b + g * b_stride elements, op(B_g) [k, n] (stored [n, k]
// when trans_b). C's rows from offsets[groups] to `rows` (an upper bound: the tokens) are set to 0.
// Precision as gemm's.
ZAYA_OP(grouped_gemm,
        (Precision precision, Trans trans_b, const int64_t* offsets, int64_t groups, int64_t rows, int64_t n,
         int64_t k, Operand a, int64_t lda, Operand b, int64_t b_stride, int64_t ldb, float* c, int64_t ldc),
        (precision, trans_b, offsets, groups, rows, n, k, a, lda, b, b_stride, ldb, c, ldc))
// Their weights' gradients: c_g [m, n] += A's rows of g^T @ B's rows of g for each group (the same device
// offsets), A [rows, m], B [rows, n], c_g = c + g * m * n.
ZAYA_OP(grouped_weight_gradient,
        (Precision precision, const int64_t* offsets, int64_t groups, int64_t m, int64_t n, Operand a,
         int64_t lda, Operand b, int64_t ldb, float* c),
        (precision, offsets, groups, m, n, a, lda, b, ldb, c))
// dst[i] = bf16(src[i]), round to nearest even (the weights' low-precision copies).
ZAYA_OP(convert_to_bf16, (const float* src, int64_t count, BFloat16* dst), (src, count, dst))
// y[rows, n] += bias[n] for every row (ldy = row stride of y).
ZAYA_OP(add_bias, (float* y, int64_t rows, int64_t n, int64_t ldy, const float* bias),
        (y, rows, n, ldy, bias))
// dbias[n] += sum over rows of dy[rows, n].
ZAYA_OP(bias_backward, (const float* dy, int64_t rows, int64_t n, int64_t ldy, float* dbias),
        (dy, rows, n, ldy, dbias))

// ---- embedding ----------------------------------------------------------------------------------------
ZAYA_FAMILY(embedding)
// out[t] = (table[ids[t]] + bias) * scale; table [vocab, hidden].
ZAYA_OP(embedding_forward,
        (const int32_t* ids, int64_t tokens, const float* table, int64_t hidden, const float* bias,
         const float* scale, float* out),
        (ids, tokens, table, hidden, bias, scale, out))
// Accumulates into dtable (rows of ids other than skip_id, the padding row, as nn.Embedding does),
// dbias and dscale. skip_id < 0 skips nothing.
ZAYA_OP(embedding_backward,
        (const int32_t* ids, int64_t tokens, const float* table, int64_t hidden, const float* bias,
         const float* scale, const float* dout, int32_t skip_id, float* dtable, float* dbias, float* dscale),
        (ids, tokens, table, hidden, bias, scale, dout, skip_id, dtable, dbias, dscale))

// ---- norms: RMSNorm and residual scaling ----------------------------------------------------------------
ZAYA_FAMILY(norms)
// y = weight * x / sqrt(mean(x^2) + eps) over rows of n; rstd[rows] saved for backward.
ZAYA_OP(rmsnorm_forward,
        (const float* x, const float* weight, int64_t rows, int64_t n, float eps, Destination y, float* rstd),
        (x, weight, rows, n, eps, y, rstd))
// dx = (accumulate ? dx : 0) + d/dx; dweight accumulates.
ZAYA_OP(rmsnorm_backward,
        (const float* x, const float* weight, const float* rstd, const float* dy, int64_t rows, int64_t n,
         float* dx, bool accumulate, float* dweight),
        (x, weight, rstd, dy, rows, n, dx, accumulate, dweight))
// out = (h + h_bias) * h_scale + (r + r_bias) * r_scale; out may alias r.
ZAYA_OP(residual_scale_forward,
        (const float* h, const float* r, const float* h_bias, const float* h_scale, const float* r_bias,
         const float* r_scale, int64_t rows, int64_t n, float* out),
        (h, r, h_bias, h_scale, r_bias, r_scale, rows, n, out))
// dh, dr overwritten; the four parameter gradients accumulate. dr may alias dout.
ZAYA_OP(residual_scale_backward,
        (const float* h, const float* r, const float* h_bias, const float* h_scale, const float* r_bias,
         const float* r_scale, const float* dout, int64_t rows, int64_t n, float* dh, float* dr,
         float* dh_bias, float* dh_scale, float* dr_bias, float* dr_scale),
        (h, r, h_bias, h_scale, r_bias, r_scale, dout, rows, n, dh, dr, dh_bias, dh_scale, dr_bias, dr_scale))

// ---- elementwise ----------------------------------------------------------------------------------------
ZAYA_FAMILY(elementwise)
// y = gelu(x) (exact, erf form); x and y [rows, n].
ZAYA_OP(gelu_forward, (const float* x, int64_t count, float* y), (x, count, y))
// dx = dy * gelu'(x); dx may alias dy.
ZAYA_OP(gelu_backward, (const float* x, const float* dy, int64_t count, float* dx), (x, dy, count, dx))
// x[0 .. count) = value.
ZAYA_OP(fill, (float* x, int64_t count, float value), (x, count, value))
// x[rows, n] *= mask[rows] (0 or 1).
ZAYA_OP(mask_rows, (Destination x, int64_t rows, int64_t n, const float* mask), (x, rows, n, mask))
// dst[rows, n] (+)= src[rows, n], with row strides.
ZAYA_OP(copy_rows,
        (const float* src, int64_t ld_src, int64_t rows, int64_t n, float* dst, int64_t ld_dst,
         bool accumulate),
        (src, ld_src, rows, n, dst, ld_dst, accumulate))
// The one-position delay of the CCA values: dst[b, s] = src[b, s - 1] for s > 0 and dst[b, 0] = first
// (the delayed projection of a zero vector: its bias, or zeros). src [batch, seq, n]; dst row stride
// ld_dst.
ZAYA_OP(delay_forward,
        (const float* src, const float* first, int64_t batch, int64_t seq, int64_t n, float* dst,
         int64_t ld_dst),
        (src, first, batch, seq, n, dst, ld_dst))
// dsrc[b, s] = ddst[b, s + 1], 0 at the last position; dfirst (if given) accumulates ddst[b, 0].
ZAYA_OP(delay_backward,
        (const float* ddst, int64_t ld_ddst, int64_t batch, int64_t seq, int64_t n, float* dsrc,
         float* dfirst),
        (ddst, ld_ddst, batch, seq, n, dsrc, dfirst))
// y[rows, n] += x[rows, n] * scale[n]  (the router's depth averaging).
ZAYA_OP(add_scaled, (const float* x, const float* scale, int64_t rows, int64_t n, float* y),
        (x, scale, rows, n, y))
// dscale[n] += sum_rows dy * x; dx = dy * scale (dx overwritten).
ZAYA_OP(add_scaled_backward,
        (const float* x, const float* scale, const float* dy, int64_t rows, int64_t n, float* dx,
         float* dscale),
        (x, scale, dy, rows, n, dx, dscale))

// ---- cca: the CCA attention's mixing before the attention itself --------------------------------------
ZAYA_FAMILY(cca)
// The q-k mean skip. qk [tokens, ld] holds q (heads * head_dim) then k (kv_heads * head_dim) per row.
// q_res[h] = (q[h] + k[h / groups]) / 2, k_res[g] = mean of q_res over the heads of group g.
ZAYA_OP(qk_mean_forward,
        (const float* qk, int64_t tokens, int64_t ld, const AttentionShape& shape, float* q_res,
         float* k_res),
        (qk, tokens, ld, shape, q_res, k_res))
// dqk (same layout as qk) accumulates.
ZAYA_OP(qk_mean_backward,
        (const float* dq_res, const float* dk_res, int64_t tokens, int64_t ld, const AttentionShape& shape,
         float* dqk),
        (dq_res, dk_res, tokens, ld, shape, dqk))
// The causal depthwise (kernel k0) then grouped (kernel k1, one group per head) convolutions over time,
// on x [batch, seq, channels]; channels = (heads + kv_heads) * head_dim. Both start from zeros padded
// on the left ((k0 - 1) + (k1 - 1) positions), so the depthwise output dw has seq + k1 - 1 positions
// per sequence [batch, seq + k1 - 1, channels] and is kept for backward. Weights as torch's Conv1d:
// depthwise [channels, 1, k0], grouped [channels, head_dim, k1]. scratch holds cca_conv_scratch floats.
// The grouped convolution's products run in `precision` (bf16: its inputs, the depthwise output and the
// output gradient rounded, with f32 sums); the depthwise convolution is f32 either way.
ZAYA_OP(cca_conv_forward,
        (Precision precision, const float* x, const AttentionShape& shape, int64_t k0, int64_t k1,
         const float* dw_weight, const float* dw_bias, const float* g_weight, const float* g_bias, float* dw,
         float* out, float* scratch),
        (precision, x, shape, k0, k1, dw_weight, dw_bias, g_weight, g_bias, dw, out, scratch))
// dx overwritten; the four parameter gradients accumulate.
ZAYA_OP(cca_conv_backward,
        (Precision precision, const float* x, const float* dw, const float* dout, const AttentionShape& shape,
         int64_t k0, int64_t k1, const float* dw_weight, const float* g_weight, float* dx, float* d_dw_weight,
         float* d_dw_bias, float* d_g_weight, float* d_g_bias, float* scratch),
        (precision, x, dw, dout, shape, k0, k1, dw_weight, g_weight, dx, d_dw_weight, d_dw_bias, d_g_weight,
         d_g_bias, scratch))
// Decoding: cca_conv_forward's output at the last position alone, out [batch, channels], for each of
// shape.batch sequences from its window [batch, (k0 - 1) + (k1 - 1) + 1, channels] of latest inputs
// (oldest first; zeros where a sequence has fewer, as the padding left of it). shape.seq is ignored.
ZAYA_OP(cca_conv_decode,
        (const float* window, const AttentionShape& shape, int64_t k0, int64_t k1, const float* dw_weight,
         const float* dw_bias, const float* g_weight, const float* g_bias, float* out),
        (window, shape, k0, k1, dw_weight, dw_bias, g_weight, g_bias, out))
// out = x * sqrt(head_dim) / max(|x|, eps) per head, times temp[head] when temp is given; x [rows, heads,
// head_dim]; norms [rows, heads] saved for backward.
ZAYA_OP(l2norm_forward,
        (const float* x, int64_t rows, int64_t heads, int64_t head_dim, const float* temp, float* out,
         float* norms),
        (x, rows, heads, head_dim, temp, out, norms))
// dx overwritten; dtemp accumulates (when temp is given).
ZAYA_OP(l2norm_backward,
        (const float* x, const float* norms, const float* dout, int64_t rows, int64_t heads, int64_t head_dim,
         const float* temp, float* dx, float* dtemp),
        (x, norms, dout, rows, heads, head_dim, temp, dx, dtemp))
// In place, NeoX layout on the first rotary_dim channels of each head; cos/sin [seq, rotary_dim / 2].
// inverse = true applies the transpose rotation (the backward pass).
ZAYA_OP(rope,
        (float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t rotary_dim,
         const float* cos, const float* sin, bool inverse),
        (x, batch, seq, heads, head_dim, rotary_dim, cos, sin, inverse))

// ---- attention ----------------------------------------------------------------------------------------
ZAYA_FAMILY(attention)
// Causal (optionally windowed) GQA softmax attention with key padding (key_mask [batch, seq], 1 = keep;
// null = all). q [B,S,H,D], k and v [B,S,KV,D], o [B,S,H,D], lse [B,H,S] (log-sum-exp, -inf for a row that
// sees no key, whose output is 0). With Precision::BF16 the products (scores, probabilities x values, and
// the backward's five) take bf16 operands and sum in f32, as gemm does; masking, softmax, the log-sum-exp
// and every row statistic stay f32.
ZAYA_OP(attention_forward,
        (Precision precision, const float* q, const float* k, const float* v, const float* key_mask,
         const AttentionShape& shape, float scale, float* o, float* lse),
        (precision, q, k, v, key_mask, shape, scale, o, lse))
// dq, dk, dv overwritten.
ZAYA_OP(attention_backward,
        (Precision precision, const float* q, const float* k, const float* v, const float* key_mask,
         const float* o, const float* lse, const float* dout, const AttentionShape& shape, float scale,
         float* dq, float* dk, float* dv),
        (precision, q, k, v, key_mask, o, lse, dout, shape, scale, dq, dk, dv))
// One new position of each of shape.batch sequences attending to its own cache: q [batch, heads, D];
// keys[b] and values[b] [lengths[b], kv_heads, D] (the query's own position last), the last `window` keys
// when window > 0; out [batch, heads, D] (0 for an empty cache). keys, values and lengths are host arrays
// (of this backend's pointers); the caches are f32 whatever the precision.
ZAYA_OP(attention_decode,
        (const float* q, const float* const* keys, const float* const* values, const int64_t* lengths,
         const AttentionShape& shape, float scale, float* out),
        (q, keys, values, lengths, shape, scale, out))

// ---- routing: the router, the experts' data movement and their SwiGLU --------------------------------
ZAYA_FAMILY(routing)
// probs = softmax(logits) over routes (= experts + 1, the last is the skip route); choice = argmax of
// probs + biases (first on ties); gate = probs[choice], or 0 when the choice is the skip route;
// lse = log-sum-exp of each token's logits (for the z-loss).
ZAYA_OP(route_top1,
        (const float* logits, const float* biases, int64_t tokens, int64_t routes, float* probs,
         int32_t* choice, float* gate, float* lse),
        (logits, biases, tokens, routes, probs, choice, gate, lse))
// dlogits overwritten from dgate through the softmax (zero for skip-routed tokens).
ZAYA_OP(route_top1_backward,
        (const float* probs, const int32_t* choice, const float* dgate, int64_t tokens, int64_t routes,
         float* dlogits),
        (probs, choice, dgate, tokens, routes, dlogits))
// Per-route token counts and probability sums, and the sums over tokens of the router entropy
// -sum p log p and of lse^2; all accumulate (so micro-batches add up).
ZAYA_OP(router_statistics,
        (const float* probs, const float* lse, const int32_t* choice, int64_t tokens, int64_t routes,
         int64_t* counts, double* prob_sums, double* entropy_sum, double* lse_square_sum),
        (probs, lse, choice, tokens, routes, counts, prob_sums, entropy_sum, lse_square_sum))
// The auxiliary losses' gradient, added to dlogits: route_coef[e] is d(loss)/d(probs[t, e]) for every token
// (the Switch load-balancing loss), z_coef * lse[t] is d(loss)/d(lse[t]) (the router z-loss).
ZAYA_OP(router_aux_backward,
        (const float* probs, const float* lse, int64_t tokens, int64_t routes, const float* route_coef,
         float z_coef, float* dlogits),
        (probs, lse, tokens, routes, route_coef, z_coef, dlogits))
// A stable grouping of tokens by expert: order[offsets[e] .. offsets[e + 1]) are expert e's tokens in
// increasing order, and order[offsets[experts] .. tokens) the skip-routed ones (choice == experts), so that
// order is a permutation of the tokens. offsets has experts + 1 entries.
ZAYA_OP(group_by_expert,
        (const int32_t* choice, int64_t tokens, int64_t experts, int32_t* order, int64_t* offsets),
        (choice, tokens, experts, order, offsets))
// dst[i] = src[order[i]] * (scale ? scale[order[i]] : 1) for i < count; rows of n.
ZAYA_OP(gather_rows,
        (const float* src, const int32_t* order, const float* scale, int64_t count, int64_t n,
         Destination dst),
        (src, order, scale, count, n, dst))
// dst[order[i]] (+)= src[i] * (scale ? scale[order[i]] : 1) for i < count.
ZAYA_OP(scatter_rows,
        (const float* src, const int32_t* order, const float* scale, int64_t count, int64_t n,
         bool accumulate, float* dst),
        (src, order, scale, count, n, accumulate, dst))
// out[i] = dot(a[order[i]], b[i]) for i < count (the gate gradient of each routed token).
ZAYA_OP(gather_dot,
        (const float* a, const int32_t* order, const float* b, int64_t count, int64_t n, float* out),
        (a, order, b, count, n, out))
// SwiGLU: gate_up [rows, 2 * n] holds gate then up; out [rows, n] = silu(gate) * up.
ZAYA_OP(swiglu_forward, (const float* gate_up, int64_t rows, int64_t n, Destination out),
        (gate_up, rows, n, out))
// dgate_up [rows, 2 * n] = the gradients of gate and up from dout [rows, n].
ZAYA_OP(swiglu_backward,
        (const float* gate_up, const float* dout, int64_t rows, int64_t n, Destination dgate_up),
        (gate_up, dout, rows, n, dgate_up))

// ---- optimizer ----------------------------------------------------------------------------------------
ZAYA_FAMILY(optimizer)
// *sum (a device value) += the sum of x^2, in double, in a fixed order.
ZAYA_OP(sum_squares, (const float* x, int64_t count, double* sum), (x, count, sum))
// AdamW with bias correction: m, v updated from grad * grad_scale; p = p (1 - lr wd) - lr m^ / (sqrt(v^) +
// eps).
ZAYA_OP(adamw_step,
        (float* param, const float* grad, float* m, float* v, int64_t count, const AdamWStep& step),
        (param, grad, m, v, count, step))
// Momentum: buf = momentum buf + grad_scale grad; out = nesterov ? grad_scale grad + momentum buf : buf.
ZAYA_OP(momentum_step,
        (float* buf, const float* grad, int64_t count, float momentum, bool nesterov, float grad_scale,
         float* out),
        (buf, grad, count, momentum, nesterov, grad_scale, out))
// Newton-Schulz orthogonalisation of `count` matrices x [count, rows, cols], each in place: x / |x|_F, then
// `steps` quintic iterations X = a X + (b A + c A^2) X with A = X X^T, run on the wide orientation
// (transposed when rows > cols). The matrices are independent (the experts of a layer): a backend runs
// them at once. In bf16 the products read bf16-rounded operands and sum in f32, as the reference Muon
// iterates in bf16; the iterate itself stays f32. The backend owns the working memory.
ZAYA_OP(newton_schulz,
        (Precision precision, float* x, int64_t count, int64_t rows, int64_t cols, int steps,
         const float coefficients[3]),
        (precision, x, count, rows, cols, steps, coefficients))
// param = param (1 - decay) - alpha * update.
ZAYA_OP(decay_and_subtract, (float* param, const float* update, int64_t count, float decay, float alpha),
        (param, update, count, decay, alpha))

// ---- loss ---------------------------------------------------------------------------------------------
ZAYA_FAMILY(loss)
// Cross-entropy of logits [rows, vocab] against labels (ignore_index -100 contributes nothing). Adds the
// summed loss over rows to *loss_sum (a device value). The gradient grad_scale * d(sum)/dlogits goes to
// dlogits when given (which may alias logits) and, rounded to bf16, to dlogits_bf16 when given: a bf16
// step's head products read it so, and rounding it here saves a pass over the largest array of the step.
ZAYA_OP(cross_entropy,
        (const float* logits, const int32_t* labels, int64_t rows, int64_t vocab, float grad_scale,
         float* dlogits, BFloat16* dlogits_bf16, double* loss_sum),
        (logits, labels, rows, vocab, grad_scale, dlogits, dlogits_bf16, loss_sum))

#undef ZAYA_OP
#undef ZAYA_FAMILY
