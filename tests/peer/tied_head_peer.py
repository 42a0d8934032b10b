"""Peer test: a model directory loads as transformers loads it, for every combination of config.json's
`tie_word_embeddings` (true, false, absent) and a stored (its own, or a copy of the embedding) or missing
`lm_head.weight`. Each combination is
either refused by zaya with an error naming lm_head.weight, or its logits equal transformers'.

Usage: tied_head_peer.py ZAYA_BINARY
"""

import json
import pathlib
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM


def main():
    zaya = sys.argv[1]
    failures = cases = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        base = tmp / "base"
        subprocess.run([zaya, "init", "--preset", "tiny", "--out", str(base), "--seed", "3"],
                       check=True, capture_output=True)
        weights = load_file(base / "model.safetensors")
        gen = torch.Generator().manual_seed(0)
        # A head that differs from the embedding, so that using one for the other shows in the logits.
        weights["lm_head.weight"] = torch.randn(weights["model.embed_tokens.weight"].shape, generator=gen)
        config = json.loads((base / "config.json").read_text())
        ids = torch.randint(0, config["vocab_size"], (1, 16), generator=gen)
        save_file({"input_ids": ids}, tmp / "in.safetensors")
        for tie in (True, False, None):
            for head in ("its own", "a copy of the embedding", "missing"):
                stored = head != "missing"
                cases += 1
                name = f"tie_word_embeddings={'absent' if tie is None else str(tie).lower()}, lm_head.weight {head}"
                model_dir = tmp / f"case{cases}"
                model_dir.mkdir()
                case_config = dict(config)
                case_config.pop("tie_word_embeddings", None)
                if tie is not None:
                    case_config["tie_word_embeddings"] = tie
                (model_dir / "config.json").write_text(json.dumps(case_config))
                case_weights = {k: v for k, v in weights.items() if stored or k != "lm_head.weight"}
                if head == "a copy of the embedding":
                    case_weights["lm_head.weight"] = weights["model.embed_tokens.weight"].clone()
                save_file(case_weights, model_dir / "model.safetensors", metadata={"format": "pt"})
                try:
                    peer = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
                    with torch.no_grad():
                        want = peer(input_ids=ids).logits
                    # Untied and missing, transformers fills the head with random values: no model to match.
                    usable = stored or bool(peer.config.tie_word_embeddings)
                except Exception as e:  # transformers refuses it too
                    want, usable = None, False
                    print(f"  transformers refuses {name}: {type(e).__name__}")
                out = tmp / f"out{cases}.safetensors"
                run = subprocess.run([zaya, "forward", "--model", str(model_dir), "--input",
                                      str(tmp / "in.safetensors"), "--output", str(out)], capture_output=True,
                                     text=True)
                if not usable:
                    ok = run.returncode != 0 and "lm_head.weight" in run.stderr
                    detail = f"refused: {run.stderr.strip()}" if run.returncode else "loaded, but transformers has no head to use"
                elif run.returncode != 0:
                    ok, detail = False, f"zaya refused: {run.stderr.strip()}"
                else:
                    ours = load_file(out)["logits"]
                    error = float((ours - want).abs().max() / want.abs().max())
                    ok, detail = error < 1e-4, f"logits {error:.1e} (relative to max)"
                failures += not ok
                print(f"{'ok' if ok else 'FAIL'}: {name}: {detail}")
    print(f"{cases - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
