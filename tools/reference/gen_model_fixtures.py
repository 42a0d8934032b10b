"""Writes tests/fixtures/model/<case>/: a ZayaForCausalLM saved by transformers (config.json,
model.safetensors, generation_config.json) and reference.safetensors with what transformers computes for
one batch: input_ids, attention_mask, logits, loss (labels = input_ids), expert_choice [layers, batch, seq]
(num_experts stands for the skip route) and grad.<name> for every trainable parameter.

The weights are drawn wider than the initializer (so every path carries signal), the balancing biases are
random (so the skip route gets chosen), and a draw is kept only if every route, skip included, is chosen
(in some layer) and the top-1 choice is decisive (the two best biased probabilities differ by more than 1e-4), so that
float rounding cannot flip a choice between implementations.

Run: tools/reference/.venv/bin/python tools/reference/gen_model_fixtures.py
"""

import pathlib

import torch
from safetensors.torch import save_file
from transformers import ZayaConfig, ZayaForCausalLM

ROOT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "model"

CASES = {
    # Plain: full causal attention, GQA groups of 2, tied head, no padding.
    "basic": dict(
        config=dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=8, num_experts=4, moe_intermediate_size=16, router_hidden_size=16),
        batch=2, seq=12, padding=None),
    # Odd: hidden 36, GQA groups of 4, a sliding-window layer, kernels 3 and 2, untied head with bias,
    # attention biases, and a right-padded batch.
    "odd": dict(
        config=dict(vocab_size=80, hidden_size=36, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
                    head_dim=12, num_experts=5, moe_intermediate_size=20, router_hidden_size=10,
                    layer_types=["hybrid", "hybrid_sliding", "hybrid"], sliding_window=4, cca_time0=3, cca_time1=2,
                    tie_word_embeddings=False, lm_head_bias=True, attention_bias=True, rms_norm_eps=1e-6,
                    rope_parameters={
                        "hybrid": {"rope_type": "default", "rope_theta": 5000.0, "partial_rotary_factor": 0.5},
                        "hybrid_sliding": {"rope_type": "default", "rope_theta": 300.0, "partial_rotary_factor": 0.5},
                    }),
        batch=3, seq=10, padding=[10, 7, 4]),
    # GQA groups of 1 (as many KV heads as query heads), full RoPE, every layer windowed, kernels 2 and 3.
    "mha_window": dict(
        config=dict(vocab_size=48, hidden_size=24, num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=3,
                    head_dim=8, num_experts=3, moe_intermediate_size=12, router_hidden_size=12,
                    layer_types=["hybrid_sliding", "hybrid_sliding"], sliding_window=5, cca_time0=2, cca_time1=3,
                    rope_parameters={
                        "hybrid_sliding": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0},
                    }),
        batch=2, seq=16, padding=None),
}


def perturb(model, gen):
    """Wider-than-init weights so that every term of every gradient is visible."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("norm.weight", "_scale")):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif name.endswith("qk_norm.temp"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
            elif p.dim() == 1:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
            elif "router" in name or "gate.down_proj" in name:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
            elif "conv" in name:
                p.copy_(0.4 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[-1] ** 0.5)
        for layer in model.model.layers:
            layer.mlp.gate.balancing_biases.copy_(0.1 * torch.randn(layer.mlp.gate.balancing_biases.shape,
                                                                     generator=gen))


def route_choices(model, inputs):
    """The raw top-1 route of every token in every layer, and the smallest margin between the two best."""
    logits_per_layer = []
    hooks = [layer.mlp.gate.register_forward_hook(lambda m, i, o: logits_per_layer.append((m, o[0].detach())))
             for layer in model.model.layers]
    with torch.no_grad():
        model(**inputs)
    for h in hooks:
        h.remove()
    choices, margin = [], float("inf")
    for module, logits in logits_per_layer:
        biased = torch.softmax(logits, dim=-1) + module.balancing_biases
        top = torch.topk(biased, 2, dim=-1)
        margin = min(margin, float((top.values[:, 0] - top.values[:, 1]).min()))
        choices.append(top.indices[:, 0])
    return torch.stack(choices).to(torch.int32), margin


def make_case(name, spec):
    out = ROOT / name
    cfg = ZayaConfig(eos_token_id=1, **spec["config"])
    batch, seq = spec["batch"], spec["seq"]
    for seed in range(100):
        gen = torch.Generator().manual_seed(1000 + seed)
        torch.manual_seed(seed)
        # transformers' default attention (sdpa): a query that sees no key (a padded position whose window
        # holds only padding) gets a zero output there, while eager attention averages every position.
        model = ZayaForCausalLM._from_config(cfg, attn_implementation="sdpa").eval()
        perturb(model, gen)
        ids = torch.randint(3, cfg.vocab_size, (batch, seq), generator=gen)
        mask = torch.ones(batch, seq, dtype=torch.int64)
        if spec["padding"]:
            for b, length in enumerate(spec["padding"]):
                mask[b, length:] = 0
                ids[b, length:] = cfg.pad_token_id
        inputs = dict(input_ids=ids, attention_mask=mask)
        choices, margin = route_choices(model, inputs)
        every_route = len(torch.unique(choices)) == cfg.num_experts + 1
        if margin > 1e-4 and every_route:
            break
        print(f"  {name} seed {seed}: margin {margin:.1e}, routes per layer {[len(torch.unique(c)) for c in choices]}")
    else:
        raise SystemExit(f"{name}: no draw with decisive routing over every route")
    print(f"{name}: seed {seed}, smallest routing margin {margin:.2e}")

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    model.zero_grad()
    result = model(**inputs, labels=ids)
    result.loss.backward()
    tensors = {
        "input_ids": ids.contiguous(),
        "attention_mask": mask.contiguous(),
        "logits": result.logits.detach().contiguous(),
        "loss": result.loss.detach().reshape(()),
        "expert_choice": choices.reshape(cfg.num_hidden_layers, batch, seq).contiguous(),
    }
    for pname, p in model.named_parameters():
        tensors["grad." + pname] = p.grad.detach().contiguous()
    save_file(tensors, out / "reference.safetensors")


def main():
    torch.use_deterministic_algorithms(True)
    for name, spec in CASES.items():
        make_case(name, spec)


if __name__ == "__main__":
    main()
