"""Peer test: a whole forward in bf16, zaya's (`zaya forward --precision bf16`) against transformers' under
`torch.autocast("cpu", dtype=torch.bfloat16)`, on the same weights and tokens; both also against
transformers in float32, for scale.

The two bf16 forwards round in different places (autocast rounds every linear layer's output and the router's
products too; zaya keeps the router, the norms and every output f32), so they are compared with bounds, in
units of bf16's relative rounding u = 2^-8:
- logits: relative L2 distance <= 16u between the two. Autocast's own distance from float32 dominates it
  (measured 3.5u on tiny, 7.4u on small; zaya's ~1u), so the bound is twice the larger. And zaya's logits
  within 8u of transformers in float32, the bound `Bf16.ModelPassesStayCloseToFloat32` sets against zaya's f32;
- loss: relative difference <= u between the two (measured: 0.002u and 0.03u).

Usage: bf16_forward.py ZAYA_BINARY
"""

import pathlib
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

U = 2.0**-8


def relative_l2(got, want):
    return float((got - want).norm() / want.norm())


def main():
    zaya = sys.argv[1]
    failures = 0
    cases = ["tiny", "small"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for preset in cases:
            model_dir = tmp / preset
            subprocess.run([zaya, "init", "--preset", preset, "--out", str(model_dir), "--seed", "7"], check=True,
                           capture_output=True)
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
            # Off the initial values, so that every path carries signal.
            gen = torch.Generator().manual_seed(1)
            with torch.no_grad():
                for _, p in model.named_parameters():
                    p.add_(0.05 * torch.randn(p.shape, generator=gen))
            model.save_pretrained(model_dir)
            ids = torch.randint(0, model.config.vocab_size, (2, 64), generator=gen)
            save_file({"input_ids": ids}, tmp / "in.safetensors")
            subprocess.run([zaya, "forward", "--model", str(model_dir), "--input", str(tmp / "in.safetensors"),
                            "--output", str(tmp / f"{preset}.out.safetensors"), "--precision", "bf16"],
                           check=True, capture_output=True)
            ours = load_file(tmp / f"{preset}.out.safetensors")
            with torch.no_grad():
                exact = model(input_ids=ids, labels=ids)
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    autocast = model(input_ids=ids, labels=ids)
            peer_logits, peer_loss = autocast.logits.float(), float(autocast.loss)
            logits = relative_l2(ours["logits"], peer_logits)
            loss = abs(float(ours["loss"]) - peer_loss) / abs(peer_loss)
            against_exact = relative_l2(ours["logits"], exact.logits)
            ok = logits <= 16 * U and loss <= U and against_exact <= 8 * U
            failures += not ok
            print(f"{'ok' if ok else 'FAIL'}: {preset}: zaya bf16 vs transformers autocast: logits {logits / U:.2f}u "
                  f"(bound 16u), loss {loss / U:.3f}u (bound 1u); against float32: zaya bf16 logits "
                  f"{against_exact / U:.2f}u (bound 8u), autocast logits "
                  f"{relative_l2(peer_logits, exact.logits) / U:.2f}u")
    print(f"{len(cases) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
