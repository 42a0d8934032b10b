"""Writes tests/fixtures/train/: ten optimizer steps of the `tiny` model computed by an independent torch
implementation of zaya's training step (transformers' ZayaForCausalLM for forward and backward; this
file's own Muon, torch.optim.AdamW, torch's global-norm clipping, a WSD schedule and the Adam balancing
controller), following the equations of docs/TRAINING.md:

- every step has two micro-batches; the loss is the summed cross-entropy over both divided by their total
  labelled positions, so the accumulated gradient is that of one batch twice as large;
- gradients are clipped to a global L2 norm (factor max_norm / (norm + 1e-6) when below one);
- Muon (attention, expert and router matrices; each expert's matrices on their own): buf = 0.95 buf + g,
  u = g + 0.95 buf, five quintic Newton-Schulz iterations on u / |u| in its wide orientation,
  p = p (1 - lr wd) - lr 0.2 sqrt(max(rows, cols)) u;
- AdamW for the rest (weight decay on the embedding and convolution kernels only);
- lr = base * WSD(tokens seen after the step): linear warmup, stable, then linear decay to 10%;
- balancing: per layer, g = fraction - target over the global batch (targets: experts share the tokens
  that do not skip; the skip bias is left alone), Adam on the biases.

Outputs: initial/ (the starting model, saved by transformers) and reference.safetensors (the batches,
per-step losses, gradient norms and lr factors, the final parameters as final.<name>).

Run: tools/reference/.venv/bin/python tools/reference/gen_train_fixtures.py
"""

import fnmatch
import math
import pathlib

import torch
from safetensors.torch import save_file
from transformers import ZayaConfig, ZayaForCausalLM

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "train"

STEPS, MICRO, BATCH, SEQ = 10, 2, 2, 32
LR, WD, CLIP = 0.01, 0.1, 1.0
MUON_MOMENTUM, NS = 0.95, (3.4445, -4.7750, 2.0315)
ADAM_BETAS, ADAM_EPS = (0.9, 0.95), 1e-8
WARMUP_TOKENS, DECAY_FRACTION, MIN_RATIO = 256, 0.3, 0.1
BAL_LR, BAL_BETAS, BAL_EPS = 1e-2, (0.9, 0.999), 1e-8

MUON_PATTERNS = ["*.self_attn.qkv_proj.*_proj*.weight", "*.self_attn.o_proj.weight", "*.mlp.experts.gate_up_proj",
                 "*.mlp.experts.down_proj", "*.mlp.gate.down_proj.weight", "*.mlp.gate.router_mlp.fc?.weight",
                 "*.mlp.gate.router_mlp.out_proj.weight"]
DECAYED_ADAMW = ["model.embed_tokens.weight", "lm_head.weight", "*.conv_qk_*.weight"]


def tiny_config():
    """zaya's `tiny` preset."""
    return ZayaConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, num_experts=4, moe_intermediate_size=64,
                      router_hidden_size=32, max_position_embeddings=1024, layer_types=["hybrid", "hybrid_sliding"],
                      sliding_window=64, pad_token_id=0, bos_token_id=2, eos_token_id=1,
                      rope_parameters={"hybrid": {"rope_type": "default", "rope_theta": 10000.0,
                                                  "partial_rotary_factor": 0.5},
                                       "hybrid_sliding": {"rope_type": "default", "rope_theta": 10000.0,
                                                          "partial_rotary_factor": 0.5}})


def newton_schulz(g):
    a, b, c = NS
    x = g.T if g.shape[0] > g.shape[1] else g
    x = x / (x.norm() + 1e-7)
    for _ in range(5):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if g.shape[0] > g.shape[1] else x


def wsd(tokens, total):
    if tokens < WARMUP_TOKENS:
        return tokens / WARMUP_TOKENS
    start = total * (1 - DECAY_FRACTION)
    if tokens <= start:
        return 1.0
    progress = min(1.0, (tokens - start) / (total - start))
    return MIN_RATIO + (1 - MIN_RATIO) * (1 - progress)


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(11)
    model = ZayaForCausalLM._from_config(tiny_config(), attn_implementation="sdpa")
    with torch.no_grad():  # routers wide enough that float rounding cannot flip a routing decision
        for name, p in model.named_parameters():
            if "router_mlp" in name and name.endswith("weight") and p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
    OUT.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(OUT / "initial")
    model.train()

    named = dict(model.named_parameters())
    muon = [n for n in named if any(fnmatch.fnmatchcase(n, p) for p in MUON_PATTERNS)]
    adam_decay = [n for n in named if n not in muon and any(fnmatch.fnmatchcase(n, p) for p in DECAYED_ADAMW)]
    adam_plain = [n for n in named if n not in muon and n not in adam_decay]
    adamw = torch.optim.AdamW([{"params": [named[n] for n in adam_decay], "weight_decay": WD},
                               {"params": [named[n] for n in adam_plain], "weight_decay": 0.0}],
                              lr=LR, betas=ADAM_BETAS, eps=ADAM_EPS)
    momentum = {n: torch.zeros_like(named[n]) for n in muon}
    gates = [layer.mlp.gate for layer in model.model.layers]
    experts = model.config.num_experts
    bal_m = [torch.zeros(experts + 1) for _ in gates]
    bal_v = [torch.zeros(experts + 1) for _ in gates]

    # Learnable data: each window counts up from a random start in a random stride, modulo 97 (offset past
    # the special tokens), so the loss has somewhere to go.
    start = torch.randint(0, 97, (STEPS, MICRO, BATCH, 1), generator=gen)
    stride = torch.randint(1, 4, (STEPS, MICRO, BATCH, 1), generator=gen)
    windows = 3 + (start + stride * torch.arange(SEQ + 1)) % 97
    total_tokens = STEPS * MICRO * BATCH * SEQ
    losses, grad_norms, lr_factors, min_margin = [], [], [], float("inf")
    for step in range(STEPS):
        model.zero_grad()
        counts = [torch.zeros(experts + 1, dtype=torch.int64) for _ in gates]
        captured = []
        hooks = [g.register_forward_hook(lambda m, i, o: captured.append((m, o[0].detach()))) for g in gates]
        loss_sum = 0.0
        labelled = MICRO * BATCH * SEQ
        for micro in range(MICRO):
            ids, labels = windows[step, micro, :, :-1], windows[step, micro, :, 1:]
            logits = model(input_ids=ids).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                     reduction="sum")
            (loss / labelled).backward()
            loss_sum += float(loss.detach())
        for h in hooks:
            h.remove()
        for module, router_logits in captured:
            biased = torch.softmax(router_logits, -1) + module.balancing_biases
            top = torch.topk(biased, 2, -1)
            min_margin = min(min_margin, float((top.values[:, 0] - top.values[:, 1]).min()))
            layer = gates.index(module)
            counts[layer] += torch.bincount(top.indices[:, 0], minlength=experts + 1)
        losses.append(loss_sum / labelled)

        norm = torch.nn.utils.clip_grad_norm_(list(named.values()), CLIP)
        grad_norms.append(float(norm))
        factor = wsd((step + 1) * labelled, total_tokens)
        lr_factors.append(factor)
        lr = LR * factor
        for group in adamw.param_groups:
            group["lr"] = lr
        adamw.step()
        with torch.no_grad():
            for n in muon:
                p = named[n]
                matrices = [(p[e], p.grad[e], momentum[n][e]) for e in range(p.shape[0])] if p.dim() == 3 else \
                    [(p, p.grad, momentum[n])]
                for weight, grad, buf in matrices:
                    buf.mul_(MUON_MOMENTUM).add_(grad)
                    update = newton_schulz(grad + MUON_MOMENTUM * buf)
                    weight.mul_(1 - lr * WD).add_(update, alpha=-lr * 0.2 * math.sqrt(max(weight.shape)))
            for layer, gate in enumerate(gates):
                total = counts[layer].sum()
                fraction = counts[layer].double() / total
                target = (1 - fraction[-1]) / experts
                error = (fraction[:-1] - target).float()
                t = step + 1
                bal_m[layer][:-1] = BAL_BETAS[0] * bal_m[layer][:-1] + (1 - BAL_BETAS[0]) * error
                bal_v[layer][:-1] = BAL_BETAS[1] * bal_v[layer][:-1] + (1 - BAL_BETAS[1]) * error * error
                m_hat = bal_m[layer][:-1] / (1 - BAL_BETAS[0] ** t)
                v_hat = bal_v[layer][:-1] / (1 - BAL_BETAS[1] ** t)
                gate.balancing_biases[:-1] -= BAL_LR * m_hat / (v_hat.sqrt() + BAL_EPS)
        print(f"step {step + 1}: loss {losses[-1]:.5f}, grad norm {norm:.3f}, lr x {factor:.3f}, "
              f"routes {[c.tolist() for c in counts]}")
    assert min_margin > 1e-5, f"a routing decision is within {min_margin:.1e} of flipping"
    print(f"smallest routing margin {min_margin:.1e}")

    tensors = {"windows": windows, "loss": torch.tensor(losses, dtype=torch.float64),
               "grad_norm": torch.tensor(grad_norms, dtype=torch.float64),
               "lr_factor": torch.tensor(lr_factors, dtype=torch.float64)}
    for name, tensor in model.state_dict().items():
        if name != "lm_head.weight":  # tied
            tensors["final." + name] = tensor.detach().clone().contiguous()
    save_file(tensors, OUT / "reference.safetensors")


if __name__ == "__main__":
    main()
