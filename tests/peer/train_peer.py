"""Peer test of a whole run: the tiny config trained by `zaya train`, exported by `zaya export`, loads in
transformers and gives the validation loss zaya gives (1e-4); the datasets `zaya prepare` wrote read back
through megatron-core; TensorBoard's own reader reads the event files and finds the logged losses.

Usage: train_peer.py ZAYA_BINARY CONFIGS_DIR
"""

import glob
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy
import torch
from megatron.core.datasets.indexed_dataset import IndexedDataset
from safetensors.torch import load_file, save_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from transformers import AutoModelForCausalLM

DOCS = pathlib.Path("/usr/share/doc/python3.11/html/_sources/library")


def run(*args):
    return subprocess.run([str(a) for a in args], check=True, capture_output=True, text=True).stdout


def main():
    zaya, configs = sys.argv[1], pathlib.Path(sys.argv[2])
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "corpus").mkdir()
        for path in sorted(DOCS.glob("[a-c]*.rst.txt")):
            shutil.copy(path, tmp / "corpus")
        run(zaya, "tokenizer", "train", "--input", tmp / "corpus", "--vocab-size", "512", "--output", tmp / "tok.json")
        run(zaya, "prepare", "--tokenizer", tmp / "tok.json", "--input", tmp / "corpus", "--output", tmp / "docs",
            "--val-fraction", "0.05")
        data = [f'data.tokenizer="{tmp}/tok.json"', f'data.validation="{tmp}/docs_val"',
                f'stages.0.mixture={{"{tmp}/docs_train" = 1.0}}', f'stages.1.mixture={{"{tmp}/docs_train" = 1.0}}',
                "stages.0.tokens=30000", "stages.1.tokens=8000"]
        run(zaya, "train", configs / "tiny.toml", "--run-dir", tmp / "run", *sum((["--set", d] for d in data), []))
        run(zaya, "export", "--checkpoint", tmp / "run", "--out", tmp / "model")

        # megatron-core reads what zaya prepare wrote.
        val = IndexedDataset(str(tmp / "docs_val"))
        tokens = numpy.concatenate([val[i] for i in range(len(val))]).astype(numpy.int64)
        print(f"megatron-core reads {len(val)} validation documents, {len(tokens)} tokens")

        # The exported model in transformers against zaya forward on the same windows.
        model = AutoModelForCausalLM.from_pretrained(tmp / "model", dtype=torch.float32).eval()
        ids = torch.from_numpy(tokens[: 8 * 128].reshape(8, 128).copy())
        with torch.no_grad():
            reference = float(model(input_ids=ids, labels=ids).loss)
        save_file({"input_ids": ids}, tmp / "in.safetensors")
        run(zaya, "forward", "--model", tmp / "model", "--input", tmp / "in.safetensors", "--output", tmp / "out.safetensors")
        ours = float(load_file(tmp / "out.safetensors")["loss"])
        print(f"validation loss: transformers {reference:.6f}, zaya {ours:.6f}")
        if abs(ours - reference) > 1e-4:
            failures.append("validation loss differs")

        # TensorBoard's reader finds every logged training loss.
        logged = [json.loads(line) for line in open(tmp / "run" / "metrics.jsonl") if '"type":"train"' in line]
        events = EventAccumulator(str(tmp / "run" / "tb"), size_guidance={"scalars": 0, "histograms": 0})
        events.Reload()
        scalars = {e.step: e.value for e in events.Scalars("train/loss")}
        mismatched = [r["step"] for r in logged if abs(scalars.get(r["step"], float("nan")) - r["loss"]) > 1e-5 * abs(r["loss"])]
        print(f"TensorBoard: {len(scalars)} train/loss points, tags {sorted(events.Tags()['scalars'])[:4]}...")
        if mismatched or not events.Histograms("routing/layer_0/load"):
            failures.append(f"TensorBoard events: mismatched steps {mismatched[:5]}")
    for failure in failures:
        print("FAIL:", failure)
    print(f"{3 - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
