"""Peer test: transformers loads the model directories zaya writes (float32 and bfloat16, single file and
sharded) and computes on them what `zaya forward` computes: logits, loss and every gradient.

Usage: model_roundtrip.py ZAYA_BINARY
"""

import pathlib
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM


def run(*args):
    subprocess.run(args, check=True, capture_output=True)


def main():
    zaya = sys.argv[1]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for preset, dtype in [("tiny", "float32"), ("tiny", "bfloat16"), ("small", "float32")]:
            model_dir = tmp / f"{preset}-{dtype}"
            run(zaya, "init", "--preset", preset, "--out", str(model_dir), "--seed", "4", "--dtype", dtype)
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
            assert type(model).__name__ == "ZayaForCausalLM"
            # Move the weights off their initial values so that every path carries signal.
            gen = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for name, p in model.named_parameters():
                    p.add_(0.05 * torch.randn(p.shape, generator=gen))
            model.save_pretrained(model_dir)  # transformers writes it back; zaya must read this too
            ids = torch.randint(0, model.config.vocab_size, (2, 24), generator=gen)
            save_file({"input_ids": ids}, tmp / "in.safetensors")
            run(zaya, "forward", "--model", str(model_dir), "--input", str(tmp / "in.safetensors"), "--output",
                str(model_dir.with_suffix(".out.safetensors")), "--grads")
            ours = load_file(model_dir.with_suffix(".out.safetensors"))
            result = model(input_ids=ids, labels=ids)
            result.loss.backward()
            logit_error = float((ours["logits"] - result.logits).abs().max() / result.logits.abs().max())
            loss_error = abs(float(ours["loss"]) - float(result.loss))
            grad_error = max(float((ours["grad." + n] - p.grad).norm() / p.grad.norm())
                             for n, p in model.named_parameters() if p.grad is not None and p.grad.norm() > 0)
            ok = logit_error < 1e-4 and loss_error < 1e-5 and grad_error < 1e-3
            failures += not ok
            print(f"{'ok' if ok else 'FAIL'}: {preset} {dtype}: logits {logit_error:.1e} (relative to max), "
                  f"loss {loss_error:.1e}, worst gradient {grad_error:.1e}")
    print(f"{3 - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
