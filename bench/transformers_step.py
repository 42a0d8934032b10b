"""Times transformers' ZayaForCausalLM forward+backward on a model directory, the same way `zaya bench step`
times zaya: random token ids, labels = input_ids, two warm-up steps, the median of the timed ones; in fp32,
or with --autocast under torch.autocast("cpu", dtype=torch.bfloat16) (f32 weights, bf16 products).

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
    parser.add_argument("--autocast", action="store_true", help="run under torch.autocast('cpu', bfloat16)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = ZayaForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.train()
    ids = torch.randint(0, model.config.vocab_size, (args.batch, args.seq), generator=torch.Generator().manual_seed(0))
    seconds = []
    warm_up = 2
    for step in range(warm_up + args.steps):
        model.zero_grad(set_to_none=False)
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        if step >= warm_up:
            seconds.append(time.perf_counter() - start)
    step_seconds = statistics.median(seconds)
    print(json.dumps({"implementation": "transformers", "autocast_bf16": args.autocast, "batch": args.batch, "seq": args.seq,
                      "threads": torch.get_num_threads(), "step_seconds": step_seconds,
                      "tokens_per_second": args.batch * args.seq / step_seconds}))


if __name__ == "__main__":
    main()
