#!/usr/bin/env python3
"""The FLOPs and bytes of each op of one zaya1-base decoder layer's forward and backward pass, as zaya's code
runs them today, and what bounds each on a GPU: the table in docs/ARCHITECTURE.md ("A layer's ops on a GPU"),
for comparing a first GPU profile op by op. Estimates from shapes, not measurements.

FLOPs are those the code executes (attention's backward computes QK^T again, and dQ in a pass of its own),
more than the model FLOPs MFU counts (`zaya info`: 6 per parameter and token, and attention's).
Bytes count what each op reads and writes in device memory as the code does it: activations and their
gradients in f32 (4 bytes), but for those their producer writes in bf16 (2 bytes: the normalised attention
input, the experts' gathered rows, SwiGLU's output and its input's gradient), the products' weights in bf16
with each other f32 operand of a cuBLASLt product rounded into scratch first (a read of the f32 value and a
write of the bf16 copy; the experts' grouped products round an f32 operand as they load), attention reading bf16 copies of k and v (made once per op) once per tile of
queries, and of q and dO once per tile of keys in dK, dV. An op is bound by its arithmetic when its FLOPs take longer at the rate it
runs on (the matrix units' bf16 rate for cuBLASLt products and zaya's bf16 kernels, the ordinary cores' f32
rate for the router's f32 products) than its bytes at the memory's bandwidth.

Usage: tools/layer_costs.py [--batch 8] [--seq 4096] [--bf16-tflops 989] [--f32-tflops 67] [--tbps 3.35]
(the defaults: ZAYA1's sequence length, an H100 SXM's data sheet)
"""

import argparse

# zaya1-base (src/model/model_dims.cpp): every layer full causal attention.
HIDDEN, HEADS, KV_HEADS, HEAD_DIM = 2048, 8, 2, 128
EXPERTS, INTERMEDIATE, ROUTER = 16, 2048, 256
K0, K1 = 2, 2  # the CCA convolutions' taps
ROUTED = 1.0  # the share of tokens the router sends to an expert (the skip route takes the rest): at most 1
# attention.cu's bf16 tiles at head_dim 128: the forward's 64 query rows, dQ's 32, dK dV's 64 keys
FORWARD_TILE, DQ_TILE, DKV_TILE = 64, 32, 64

F32, BF16 = 4, 2
# Bytes per element of a product's activation operand A: an f32 one that cuBLASLt's caller rounds into bf16
# scratch first (read, write, read again), one written in bf16 by the op that made it (read once).
ROUNDED, WRITTEN_BF16 = F32 + 2 * BF16, BF16


def product(m, n, k, operand_bytes=ROUNDED):
    """FLOPs and bytes of C[m, n] = A[m, k] B[k, n]^T with B a bf16 weight: the operand A read as
    operand_bytes says, the weight read, C written in f32."""
    flops = 2 * m * n * k
    return flops, m * k * operand_bytes + n * k * BF16 + m * n * F32


def rows(args):
    T = args.batch * args.seq
    QD, KD, C = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, (HEADS + KV_HEADS) * HEAD_DIM
    table = []

    def add(name, flops, bytes_, unit):
        table.append((name, flops, bytes_, unit))

    # Each product once forward and twice backward (the input's gradient and the weight's, from the output's
    # f32 gradient, rounded).
    def projection(name, n, k, forward_operand):
        f, forward = product(T, n, k, forward_operand)
        _, backward = product(T, n, k)
        add(name, 3 * f, forward + 2 * backward, "matrix")

    # q, k and v project the input norm's bf16 output; o_proj reads attention's f32 output, rounded.
    projection("q, k projections (x -> [T, C])", QD + KD, HIDDEN, WRITTEN_BF16)
    projection("v projections (current and delayed)", KD, HIDDEN, WRITTEN_BF16)
    projection("o_proj", HIDDEN, QD, ROUNDED)
    # Depthwise: 2 k0 FLOPs per element; grouped: a [d, d] product per tap and group.
    add("CCA depthwise convolution", 3 * 2 * T * C * K0, 3 * 3 * T * C * F32, "vector")
    f, b = product(T * (HEADS + KV_HEADS), HEAD_DIM, HEAD_DIM * K1)
    add("CCA grouped convolution", 3 * f, 3 * b, "matrix")
    add("q-k mean, L2 norms, RoPE, delay", 3 * 20 * T * (QD + KD), 3 * 8 * T * (QD + KD) * F32, "vector")
    # Causal: each query sees half the sequence on average. Forward: QK^T and PV; backward: 5 products
    # (dV, dP, dS.K -> dQ, dS^T.Q -> dK, and QK^T again), dQ in a pass of its own.
    pairs = args.batch * HEADS * args.seq * (args.seq + 1) / 2
    per_pair = 2 * 2 * HEAD_DIM
    def streamed(tile, heads):  # two [seq, head_dim] bf16 tensors of each head, half read per tile of rows
        return args.batch * heads * (args.seq / tile) * (args.seq / 2) * HEAD_DIM * 2 * BF16

    # The streamed operands are bf16 copies, each made by one pass (an f32 read, a bf16 write): q, k, v
    # forward, and dO too backward.
    def copies(count):
        return count * (F32 + BF16)

    add("attention forward", per_pair * pairs,
        streamed(FORWARD_TILE, KV_HEADS) + copies(T * (QD + 2 * KD)) + 3 * T * QD * F32, "matrix")
    add("attention backward", 3.5 * per_pair * pairs,
        streamed(DQ_TILE, KV_HEADS) + streamed(DKV_TILE, HEADS) + copies(T * (2 * QD + 2 * KD))
        + 6 * T * QD * F32, "matrix")
    # Forward: each norm reads [T, H] f32 and writes it (the input norm in bf16), each scaling reads two and
    # writes one. Backward: each norm reads x and dy once and writes dx (its weight's gradient summed on the
    # way); each scaling reads dout, h and r once (its four parameter gradients summed as dh and dr are
    # written).
    forward = T * HIDDEN * ((F32 + BF16) + 2 * F32 + 2 * 3 * F32)
    backward = T * HIDDEN * (2 * 3 * F32 + 2 * 5 * F32)
    add("norms, residual scaling (2 each)", 3 * 2 * 10 * T * HIDDEN, forward + backward, "vector")
    # The router's products stay f32 (no TF32): on the f32 cores.
    router = 2 * T * (HIDDEN * ROUTER + 2 * ROUTER * ROUTER + ROUTER * (EXPERTS + 1))
    add("router products (f32)", 3 * router, 3 * T * (HIDDEN + 6 * ROUTER) * F32, "f32 cores")
    # The experts: every routed token through gate|up and down, a grouped product over all experts each.
    # Every operand of theirs is written in bf16: the gathered rows and their gradient, SwiGLU's output and
    # its input's gradient.
    f1, b1 = product(int(ROUTED * T), 2 * INTERMEDIATE, HIDDEN, WRITTEN_BF16)
    f2, b2 = product(int(ROUTED * T), HIDDEN, INTERMEDIATE, WRITTEN_BF16)
    add("experts' products (3 grouped per pass)", 3 * (f1 + f2),
        3 * (b1 + b2) + (EXPERTS - 1) * 3 * 3 * HIDDEN * INTERMEDIATE * BF16, "matrix")
    # Forward: SwiGLU reads [T, 2I] f32 and writes [T, I] bf16; the gather reads [T, H] f32 and writes it
    # in bf16; the scatter reads and writes [T, H] f32. Backward: the gate-scaled gather of the output's
    # gradient (f32 in, bf16 out), the gate's dot products (two [T, H] f32 reads), SwiGLU's backward
    # ([T, 2I] and [T, I] f32 in, [T, 2I] bf16 out), the input rows gathered again (f32 in, bf16 out), and
    # the input gradient scattered (f32 in and out).
    TI, TH = T * INTERMEDIATE, T * HIDDEN
    forward = 2 * TI * F32 + TI * BF16 + TH * (F32 + BF16) + 2 * TH * F32
    backward = (TH * (F32 + BF16) + 2 * TH * F32 + 3 * TI * F32 + 2 * TI * BF16 + TH * (F32 + BF16)
                + 2 * TH * F32)
    add("SwiGLU, gather, scatter", 3 * 4 * TI, forward + backward, "vector")
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--bf16-tflops", type=float, default=989.0)
    parser.add_argument("--f32-tflops", type=float, default=67.0)
    parser.add_argument("--tbps", type=float, default=3.35)
    args = parser.parse_args()
    rate = {"matrix": args.bf16_tflops * 1e12, "f32 cores": args.f32_tflops * 1e12,
            "vector": args.f32_tflops * 1e12}
    print(f"| op (zaya1-base layer, {args.batch} x {args.seq} tokens, forward + backward) | GFLOP | GB | "
          f"runs on | ms at its rate | ms at {args.tbps} TB/s | bound by |")
    print("| --- | ---: | ---: | --- | ---: | ---: | --- |")
    total_ms = total_flops = 0.0
    for name, flops, bytes_, unit in rows(args):
        compute_ms = flops / rate[unit] * 1e3
        memory_ms = bytes_ / (args.tbps * 1e12) * 1e3
        bound = "arithmetic" if compute_ms >= memory_ms else "memory"
        total_ms += max(compute_ms, memory_ms)
        total_flops += flops
        print(f"| {name} | {flops / 1e9:,.0f} | {bytes_ / 1e9:.2f} | {unit} | {compute_ms:.2f} | "
              f"{memory_ms:.2f} | {bound} |")
    print(f"| **the layer, as run** | {total_flops / 1e9:,.0f} | | | | | {total_ms:.1f} ms at best |")


if __name__ == "__main__":
    main()
