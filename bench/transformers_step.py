"""Times transformers' ZayaForCausalLM forward+backward on a model directory, the same way `zaya bench step`
times zaya: random token ids, labels = input_ids, one warm-up step, the median of the timed ones.

Run with the reference venv: tools/reference/.venv/bin/python bench/transformers_step.py --model DIR
"""

import argparse
import json
import statistics
import time

import torch
from transformers import ZayaForCausalLM


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = ZayaForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.train()
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), generator=torch.Generator().manual_seed(0))
    seconds = []
    for step in range(args.steps + 1):
        model.zero_grad(set_to_none=False)
        start = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        if step:
            seconds.append(time.perf_counter() - start)
    step_seconds = statistics.median(seconds)
    print(json.dumps({"implementation": "transformers", "batch": args.batch, "seq": args.seq,
                      "threads": torch.get_num_threads(), "step_seconds": step_seconds,
                      "tokens_per_second": args.batch * args.seq / step_seconds}))


if __name__ == "__main__":
    main()
