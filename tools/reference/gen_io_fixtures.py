"""Writes the format fixtures of tests/fixtures/io/ with the reference libraries:

- python_written.safetensors: one tensor of each dtype, written by the `safetensors` package, with
  python_written.json listing every value as a number so the C++ reader can be checked element by element.
- config_transformers.json: a ZayaConfig with non-default values, saved by transformers.
- sharded_model/: a tiny ZayaForCausalLM saved by transformers with a small max_shard_size, so that the
  weights are split into shards plus model.safetensors.index.json.

Run: tools/reference/.venv/bin/python tools/reference/gen_io_fixtures.py
"""

import json
import pathlib

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import ZayaConfig, ZayaForCausalLM

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "io"


def write_dtype_file():
    gen = torch.Generator().manual_seed(7)
    tensors = {
        "f32": torch.randn(3, 5, generator=gen),
        "bf16": torch.randn(2, 3, 4, generator=gen).to(torch.bfloat16),
        "f16": torch.randn(7, generator=gen).to(torch.float16),
        "f64": torch.randn(2, 2, generator=gen).to(torch.float64),
        "i32": torch.randint(-1000, 1000, (4, 3), generator=gen, dtype=torch.int32),
        "i64": torch.tensor([[-(2**40), 3], [5, 2**50]], dtype=torch.int64),
        "u8": torch.arange(0, 250, 25, dtype=torch.uint8),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
    }
    save_file(tensors, OUT / "python_written.safetensors", metadata={"format": "pt", "origin": "zaya fixture"})
    expected = {
        name: {"shape": list(t.shape), "values": t.to(torch.float64).flatten().tolist()
               if t.dtype != torch.int64 else t.flatten().tolist()}
        for name, t in tensors.items()
    }
    (OUT / "python_written.json").write_text(json.dumps(expected, indent=1) + "\n")


def tiny_config(**overrides):
    fields = dict(
        vocab_size=96, hidden_size=24, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, num_experts=3, moe_intermediate_size=16, router_hidden_size=12,
        layer_types=["hybrid", "hybrid_sliding", "hybrid"], sliding_window=5, max_position_embeddings=256,
        rms_norm_eps=1e-6, initializer_range=0.05, eos_token_id=[1, 5], bos_token_id=2, pad_token_id=0,
        cca_time0=3, cca_time1=2, tie_word_embeddings=False, lm_head_bias=True,
        rope_parameters={
            "hybrid": {"rope_type": "default", "rope_theta": 12345.0, "partial_rotary_factor": 0.5},
            "hybrid_sliding": {"rope_type": "default", "rope_theta": 777.0, "partial_rotary_factor": 1.0},
        },
    )
    fields.update(overrides)
    return ZayaConfig(**fields)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    write_dtype_file()
    tiny_config().save_pretrained(OUT / "config_dir")
    (OUT / "config_transformers.json").write_text((OUT / "config_dir" / "config.json").read_text())
    for path in (OUT / "config_dir").iterdir():
        path.unlink()
    (OUT / "config_dir").rmdir()

    torch.manual_seed(3)
    model = ZayaForCausalLM(tiny_config(tie_word_embeddings=True, lm_head_bias=False))
    model.save_pretrained(OUT / "sharded_model", max_shard_size="20KB")
    # What the Python reader finds in the shards (the tied lm_head.weight is not stored).
    checksums = {}
    for shard in sorted((OUT / "sharded_model").glob("model-*.safetensors")):
        with safe_open(shard, framework="pt") as f:
            for name in f.keys():
                checksums[name] = float(f.get_tensor(name).double().sum())
    (OUT / "sharded_model_tensors.json").write_text(json.dumps(
        {"names": sorted(checksums), "checksums": checksums}, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
