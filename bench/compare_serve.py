"""Generation speed of `zaya serve` against transformers' ZayaForCausalLM.generate (issue 15's targets).

Run with the reference venv (tools/reference/setup_venv.sh) from anywhere:

    tools/reference/.venv/bin/python bench/compare_serve.py [--preset medium] [--threads 2] [--new-tokens 64]
        [--runs 3] [--streams 8] [--json OUT] [--workdir DIR]

What it does
  Model: `zaya tokenizer train` makes a 512-token BPE tokenizer from the test fixtures, and
  `zaya init --preset PRESET --seed 1 --tokenizer ...` writes a randomly initialised float32 model directory
  (in a temporary directory, or under --workdir/PRESET where it is kept and reused). Both sides load that same
  directory in --precision (fp32: float32 on both sides; bf16: transformers' dtype bfloat16 and
  `zaya serve --precision bf16`, which reads bf16 weight copies) and get the same prompts as token ids
  (PROMPT_TOKENS ids cut from a fixture text with the model's own tokenizer), so neither side's tokenizer is
  timed.

  transformers (in this process): AutoModelForCausalLM.from_pretrained(dtype), torch.set_num_threads
  (--threads), under torch.inference_mode, generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False)
  with its default KV cache, single stream.
    single tok/s = N / wall time of generate(N)                    (prefill included)
    decode tok/s = (N - 1) / (wall of generate(N) - wall of generate(1))   (prefill and overheads cancel)

  zaya serve (a child process): `zaya --threads T serve --model DIR --port 0 --max-running 8`, driven with the
  openai client (/v1/completions, temperature 0, max_tokens N).
    single tok/s = usage.completion_tokens / wall of one non-streamed request   (prefill and HTTP included)
    decode tok/s = (tokens(N) - tokens(1)) / (wall(N) - wall(1)), as for transformers
    (the table's decode figures use the medians over runs of those walls and counts; per run they can be n/a
    when noise makes wall(1) >= wall(N))
    STREAMS concurrent clients (one thread each, each with its own prompt, stream=True, started together
    behind a barrier) ask for logprobs=0 as well: the server then sends one chunk per token even when its text
    is empty (ids beyond the 512-token tokenizer print as nothing, as do a character's first bytes), so the
    chunks count tokens exactly and time the first one. (Asking costs the engine one log-sum-exp over the
    vocabulary per token, ~30 us at medium's 32768 tokens or 2% of an 8-sequence step, and a few bytes per
    chunk. The non-streamed requests do not ask.)
      total tok/s = all tokens / wall time from the first request sent to the last stream done
      TTFT        = per client, time from sending its request to the first chunk that carries a token;
                    p50 is the median, p99 the nearest-rank 99th percentile, which for fewer than 100
                    clients is the maximum.
    The server stops a sequence at its end-of-text token (transformers cannot: min_new_tokens), so token
    counts are the real ones, not N: usage.completion_tokens for the non-streamed requests, the counted
    chunks for streams (checked against the server's zaya_generation_tokens_total from /metrics); sequences
    that ended early are reported.

  Each run times transformers and the server alternately (the order flips every run), after one untimed
  warm-up of each; the table shows the medians over --runs and the targets: zaya single >= 3x transformers
  single, zaya STREAMS-stream total >= 3x zaya single. The clients' own CPU time (8 Python threads parsing
  SSE) competes with the server on a small machine; it is part of what is measured.

  Afterwards an untimed check compares the two sides' greedy tokens for the single-stream prompt: per
  position the chosen token's log-probability (and its text where it prints).

  Note: the openai client keeps its connection alive, and each non-streamed request then pays a ~40 ms
  delayed-ACK stall if the server's socket does not set TCP_NODELAY (many HTTP libraries' default; zaya sets it); it is in the
  single-stream walls, not in the decode-only figures (it cancels in wall(N) - wall(1)).
"""

import argparse
import ctypes
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ZAYA = ROOT / "build" / "src" / "zaya"
TOKENIZER_INPUTS = [ROOT / "tests/fixtures/eval/text.txt", ROOT / "tests/fixtures/tokenizer/corpus.txt"]
PROMPT_TEXT = ROOT / "tests/fixtures/eval/text.txt"
PROMPT_TOKENS = 32
PAUSE_SECONDS = 0.5  # between phases, so one side's spinning worker threads settle before the other is timed


def run_checked(command):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"failed ({result.returncode}): {' '.join(map(str, command))}\n{result.stdout}{result.stderr}")
    return result.stdout


def make_model(preset, workdir):
    """The model directory for PRESET under workdir, made (tokenizer, then weights) unless it is there."""
    model = workdir / "model"
    if (model / "config.json").exists() and (model / "model.safetensors").exists():
        print(f"reusing {model}")
        return model
    workdir.mkdir(parents=True, exist_ok=True)
    tokenizer = workdir / "tok.json"
    command = [ZAYA, "tokenizer", "train"]
    for path in TOKENIZER_INPUTS:
        command += ["--input", path]
    run_checked(command + ["--vocab-size", "512", "--output", tokenizer])
    start = time.perf_counter()
    run_checked([ZAYA, "init", "--preset", preset, "--out", model, "--seed", "1", "--tokenizer", tokenizer,
                 "--force"])
    print(f"initialised preset {preset} into {model} ({time.perf_counter() - start:.1f} s)")
    return model


def make_prompts(model, count):
    """COUNT prompts of PROMPT_TOKENS token ids: consecutive windows of the fixture text's tokens."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    tokenizer.model_max_length = 1 << 30  # the whole text is cut into windows; no warning about its length
    ids = tokenizer(PROMPT_TEXT.read_text(encoding="utf-8"), add_special_tokens=False).input_ids
    if len(ids) < count * PROMPT_TOKENS:
        sys.exit(f"{PROMPT_TEXT} has {len(ids)} tokens, fewer than {count} prompts of {PROMPT_TOKENS}")
    return tokenizer, [ids[i * PROMPT_TOKENS:(i + 1) * PROMPT_TOKENS] for i in range(count)]


# ---------------------------------------------------------------------------------------------- server


def _die_with_parent():
    # Linux: the server gets SIGTERM if this process dies, even by SIGKILL.
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Server:
    def __init__(self, model, threads, max_running, log_path, precision):
        self.log_path = log_path
        self.log = open(log_path, "w")
        command = [str(ZAYA), "--threads", str(threads), "serve", "--model", str(model), "--port", "0",
                   "--max-running", str(max_running), "--precision", precision]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                        preexec_fn=_die_with_parent)
        self.url = None
        deadline = time.monotonic() + 600
        start = time.perf_counter()
        while self.url is None:
            match = re.search(r"listening on (http://\S+)", Path(log_path).read_text())
            if match:
                self.url = match.group(1)
            elif self.process.poll() is not None:
                sys.exit(f"zaya serve exited with {self.process.returncode}:\n{Path(log_path).read_text()}")
            elif time.monotonic() > deadline:
                sys.exit(f"zaya serve did not start in 600 s:\n{Path(log_path).read_text()}")
            else:
                time.sleep(0.05)
        self.load_seconds = time.perf_counter() - start
        print(f"zaya serve ready at {self.url} after {self.load_seconds:.1f} s (pid {self.process.pid})")

    def generated_tokens(self):
        """The server's zaya_generation_tokens_total counter."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=30) as response:
            text = response.read().decode()
        match = re.search(r"^zaya_generation_tokens_total (\d+)", text, re.M)
        return int(match.group(1)) if match else None

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


# ---------------------------------------------------------------------------------------------- timing


def percentile(values, q):
    """Nearest-rank percentile: the smallest value with at least q% of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


class TransformersSide:
    def __init__(self, model, threads, precision):
        import torch
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()

        self.torch = torch
        torch.set_num_threads(threads)
        self.model = AutoModelForCausalLM.from_pretrained(
            str(model), dtype=torch.bfloat16 if precision == "bf16" else torch.float32)
        self.model.eval()
        self.threads = torch.get_num_threads()

    def generate(self, prompt, new_tokens):
        """(seconds, generated ids) of one greedy generate call with the default KV cache."""
        torch = self.torch
        ids = torch.tensor([prompt])
        with torch.inference_mode():
            start = time.perf_counter()
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                      min_new_tokens=new_tokens, do_sample=False)
            seconds = time.perf_counter() - start
        return seconds, out[0, len(prompt):].tolist()

    def measure(self, prompt, new_tokens):
        one, _ = self.generate(prompt, 1)
        full, generated = self.generate(prompt, new_tokens)
        if len(generated) != new_tokens:
            print(f"note: transformers generated {len(generated)} tokens, not {new_tokens}")
        return {"seconds_1": one, "tokens_1": 1, "seconds_n": full, "tokens": len(generated),
                "single_tok_s": len(generated) / full,
                "decode_tok_s": (len(generated) - 1) / (full - one) if full > one else None}


class ZayaSide:
    def __init__(self, server):
        from openai import OpenAI

        self.server = server
        self.client = OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=3600)
        self.model_name = self.client.models.list().data[0].id

    def complete(self, prompt, max_tokens):
        start = time.perf_counter()
        response = self.client.completions.create(model=self.model_name, prompt=prompt, max_tokens=max_tokens,
                                                  temperature=0)
        seconds = time.perf_counter() - start
        choice = response.choices[0]
        return seconds, response.usage.completion_tokens, choice.finish_reason, choice.text

    def measure_single(self, prompt, new_tokens):
        one, tokens_1, _, _ = self.complete(prompt, 1)
        full, tokens, finish, _ = self.complete(prompt, new_tokens)
        if tokens != new_tokens:
            print(f"note: zaya single stream stopped after {tokens} of {new_tokens} tokens ({finish})")
        return {"seconds_1": one, "tokens_1": tokens_1, "seconds_n": full, "tokens": tokens, "finish_reason": finish,
                "single_tok_s": tokens / full,
                "decode_tok_s": (tokens - tokens_1) / (full - one) if full > one and tokens > tokens_1 else None}

    def _stream(self, prompt, new_tokens, barrier, out):
        # logprobs=0 (the chosen token's own log-probability) makes the server send one chunk per token even
        # when the token's text is empty (ids beyond a small tokenizer's vocabulary decode to nothing, and a
        # character's first bytes wait for its last): the chunks then count tokens exactly and time the first.
        barrier.wait()
        start = time.perf_counter()
        first_token = first_chunk = None
        tokens = 0
        finish = None
        stream = self.client.completions.create(model=self.model_name, prompt=prompt, max_tokens=new_tokens,
                                                temperature=0, stream=True, logprobs=0)
        for chunk in stream:
            now = time.perf_counter()
            if first_chunk is None:
                first_chunk = now
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            count = len(choice.logprobs.tokens) if choice.logprobs and choice.logprobs.tokens else 0
            if count and first_token is None:
                first_token = now
            tokens += count
            if choice.finish_reason:
                finish = choice.finish_reason
        end = time.perf_counter()
        out.update({"start": start, "end": end, "finish_reason": finish, "tokens": tokens,
                    "ttft": (first_token if first_token is not None else first_chunk) - start})

    def measure_streams(self, prompts, new_tokens):
        counter_before = self.server.generated_tokens()
        barrier = threading.Barrier(len(prompts))
        results = [{} for _ in prompts]
        errors = []

        def worker(i):
            try:
                self._stream(prompts[i], new_tokens, barrier, results[i])
            except Exception as e:  # reported below; the others still finish
                errors.append(f"stream {i}: {e!r}")
                barrier.abort()

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(prompts))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            sys.exit("concurrent streams failed:\n" + "\n".join(errors))
        counter_after = self.server.generated_tokens()
        wall = max(r["end"] for r in results) - min(r["start"] for r in results)
        tokens = sum(r["tokens"] for r in results)
        server_tokens = counter_after - counter_before if None not in (counter_before, counter_after) else None
        if server_tokens is not None and server_tokens != tokens:
            print(f"note: the streams brought {tokens} tokens; the server counted {server_tokens}")
        short = [(i, r["finish_reason"], r["tokens"]) for i, r in enumerate(results) if r["tokens"] != new_tokens]
        if short:
            print(f"note: streams that ended before {new_tokens} tokens (index, finish_reason, tokens): {short}")
        ttfts = [r["ttft"] for r in results]
        return {"wall": wall, "tokens": tokens, "server_tokens": server_tokens, "total_tok_s": tokens / wall,
                "ttft_p50": statistics.median(ttfts), "ttft_p99": percentile(ttfts, 99), "ttft_max": max(ttfts),
                "ttfts": ttfts, "finish_reasons": [r["finish_reason"] for r in results]}


# ---------------------------------------------------------------------------------------------- main


def check_agreement(peer, zaya, tokenizer, prompt, new_tokens, tolerance=1e-3):
    """Untimed: do both sides pick the same greedy tokens? Token ids beyond the tokenizer's vocabulary print
    as nothing, so the check compares each position's chosen-token log-probability (transformers' raw logits
    through log_softmax; the server's logprobs=0) and, where the token prints, its text."""
    torch = peer.torch
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        out = peer.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                  min_new_tokens=new_tokens, do_sample=False, output_logits=True,
                                  return_dict_in_generate=True)
    peer_ids = out.sequences[0, len(prompt):].tolist()
    peer_logprobs = [torch.log_softmax(logits[0].float(), -1)[i].item() for logits, i in zip(out.logits, peer_ids)]
    response = zaya.client.completions.create(model=zaya.model_name, prompt=prompt, max_tokens=new_tokens,
                                              temperature=0, logprobs=0)
    choice = response.choices[0]
    zaya_tokens, zaya_logprobs = choice.logprobs.tokens, choice.logprobs.token_logprobs
    compared = min(len(peer_ids), len(zaya_tokens))
    first_difference = None
    worst = 0.0
    for k in range(compared):
        gap = abs(peer_logprobs[k] - zaya_logprobs[k])
        worst = max(worst, gap)
        text = tokenizer.decode([peer_ids[k]])
        if gap > tolerance or (text and zaya_tokens[k] and text != zaya_tokens[k]):
            first_difference = k
            break
    result = {"positions_compared": compared, "first_difference": first_difference,
              "max_logprob_gap": worst, "zaya_finish_reason": choice.finish_reason,
              "zaya_tokens": len(zaya_tokens), "transformers_tokens": len(peer_ids),
              "ids_beyond_tokenizer": sum(i >= len(tokenizer) for i in peer_ids)}
    if first_difference is not None:
        k = first_difference
        print(f"note: greedy outputs differ at generated token {k}: transformers id {peer_ids[k]} "
              f"logprob {peer_logprobs[k]:.5f}, zaya {zaya_tokens[k]!r} logprob {zaya_logprobs[k]:.5f}")
    if len(zaya_tokens) < len(peer_ids):
        print(f"note: zaya stopped after {len(zaya_tokens)} tokens ({choice.finish_reason}); transformers cannot "
              f"(min_new_tokens)")
    return result


def uptime():
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "load average: %.2f, %.2f, %.2f" % os.getloadavg()


def median_of(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def decode_from_medians(sides):
    """Decode tok/s from the medians over runs of generate(1)'s and generate(N)'s times and token counts: one
    noisy pair in a run cannot make it negative, as a per-run difference can."""
    extra = median_of(sides, "tokens") - median_of(sides, "tokens_1")
    seconds = median_of(sides, "seconds_n") - median_of(sides, "seconds_1")
    return extra / seconds if extra > 0 and seconds > 0 else None


def fmt(value, spec=".1f", suffix=""):
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="medium")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--max-running", type=int, default=8)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                        help="the same on both sides: transformers' dtype, zaya serve --precision")
    parser.add_argument("--json", help="write every number here")
    parser.add_argument("--workdir", help="keep the tokenizer and model under WORKDIR/PRESET and reuse them")
    args = parser.parse_args()
    if args.new_tokens < 2:
        parser.error("--new-tokens must be at least 2")
    if not ZAYA.exists():
        sys.exit(f"{ZAYA} is missing: build zaya first")

    load_start = uptime()
    print(f"uptime at start: {load_start}")
    print(f"preset {args.preset}, threads {args.threads}, {args.new_tokens} new tokens, {args.runs} runs, "
          f"{args.streams} streams, prompts of {PROMPT_TOKENS} tokens, {args.precision} on both sides")
    print(run_checked([ZAYA, "info", "--preset", args.preset]).splitlines()[0])

    temp = None
    if args.workdir:
        workdir = Path(args.workdir).resolve() / args.preset
    else:
        temp = tempfile.mkdtemp(prefix="compare_serve.")
        workdir = Path(temp)
    server = None
    # SIGTERM/SIGHUP end the run through the finally below (and the server's death signal covers SIGKILL).
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))
    try:
        model = make_model(args.preset, workdir)
        tokenizer, prompts = make_prompts(model, max(args.streams, 1))
        prompt = prompts[0]
        server = Server(model, args.threads, args.max_running, workdir / "serve.log", args.precision)
        zaya = ZayaSide(server)
        peer = TransformersSide(model, args.threads, args.precision)
        print(f"transformers: {type(peer.model).__name__}, torch threads {peer.threads}, "
              f"generation cache default (use_cache={peer.model.generation_config.use_cache})")

        # Untimed warm-up of both: first calls allocate caches, pages, thread pools.
        peer.generate(prompt, 2)
        zaya.complete(prompt, 2)

        runs = []
        for run in range(args.runs):
            record = {}

            def time_peer():
                record["transformers"] = peer.measure(prompt, args.new_tokens)
                time.sleep(PAUSE_SECONDS)

            def time_zaya():
                record["zaya_single"] = zaya.measure_single(prompt, args.new_tokens)
                time.sleep(PAUSE_SECONDS)
                record["zaya_streams"] = zaya.measure_streams(prompts[:args.streams], args.new_tokens)
                time.sleep(PAUSE_SECONDS)

            order = (time_peer, time_zaya) if run % 2 == 0 else (time_zaya, time_peer)
            for phase in order:
                phase()
            p, s, m = record["transformers"], record["zaya_single"], record["zaya_streams"]
            print(f"run {run + 1}/{args.runs}: transformers {p['single_tok_s']:.1f} tok/s "
                  f"(decode {fmt(p['decode_tok_s'])}), zaya single {s['single_tok_s']:.1f} tok/s "
                  f"(decode {fmt(s['decode_tok_s'])}), zaya {args.streams} streams {m['total_tok_s']:.1f} tok/s, "
                  f"TTFT p50 {m['ttft_p50'] * 1e3:.0f} ms max {m['ttft_max'] * 1e3:.0f} ms")
            runs.append(record)

        agreement = check_agreement(peer, zaya, tokenizer, prompt, args.new_tokens)
    finally:
        if server is not None:
            server.stop()
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)

    hf_single = median_of([r["transformers"] for r in runs], "single_tok_s")
    hf_decode = decode_from_medians([r["transformers"] for r in runs])
    z_single = median_of([r["zaya_single"] for r in runs], "single_tok_s")
    z_decode = decode_from_medians([r["zaya_single"] for r in runs])
    z_total = median_of([r["zaya_streams"] for r in runs], "total_tok_s")
    ttft_p50 = median_of([r["zaya_streams"] for r in runs], "ttft_p50")
    ttft_p99 = median_of([r["zaya_streams"] for r in runs], "ttft_p99")
    single_ratio = z_single / hf_single
    decode_ratio = z_decode / hf_decode if z_decode and hf_decode else None
    streams_ratio = z_total / z_single
    load_end = uptime()

    def verdict(ratio):
        return "met" if ratio is not None and ratio >= 3 else "NOT met"

    print()
    print(f"medians of {args.runs} runs; preset {args.preset}, {args.threads} threads, {args.new_tokens} new tokens, "
          f"{PROMPT_TOKENS}-token prompts, {args.precision}")
    rows = [
        ("transformers single stream", f"{hf_single:.1f} tok/s", f"decode only {fmt(hf_decode)} tok/s"),
        ("zaya serve single stream", f"{z_single:.1f} tok/s", f"decode only {fmt(z_decode)} tok/s"),
        ("  zaya / transformers", f"{single_ratio:.2f}x", f"target >= 3x: {verdict(single_ratio)}; "
                                                          f"decode only {fmt(decode_ratio, '.2f', 'x')}"),
        (f"zaya serve {args.streams} streams total", f"{z_total:.1f} tok/s", ""),
        (f"  {args.streams} streams / single", f"{streams_ratio:.2f}x", f"target >= 3x: {verdict(streams_ratio)}"),
        ("  time to first token p50", f"{ttft_p50 * 1e3:.0f} ms", ""),
        ("  time to first token p99", f"{ttft_p99 * 1e3:.0f} ms",
         f"nearest rank: the max of {args.streams}" if args.streams < 100 else "nearest rank"),
    ]
    for name, value, note in rows:
        print(f"{name:<34}{value:>14}   {note}")
    a = agreement
    same = "yes" if a["first_difference"] is None else f"no, from token {a['first_difference']}"
    print(f"same greedy tokens (untimed check, single prompt): {same}; {a['positions_compared']} positions, "
          f"largest chosen-token logprob gap {a['max_logprob_gap']:.1e}; "
          f"{a['ids_beyond_tokenizer']} of {a['transformers_tokens']} ids print as nothing (beyond the tokenizer)")
    print(f"uptime at end: {load_end}")

    if args.json:
        summary = {
            "preset": args.preset, "threads": args.threads, "new_tokens": args.new_tokens, "runs": args.runs,
            "streams": args.streams, "max_running": args.max_running, "prompt_tokens": PROMPT_TOKENS,
            "precision": args.precision, "uptime_start": load_start, "uptime_end": load_end,
            "server_load_seconds": server.load_seconds,
            "medians": {"transformers_single_tok_s": hf_single, "transformers_decode_tok_s": hf_decode,
                        "zaya_single_tok_s": z_single, "zaya_decode_tok_s": z_decode,
                        "zaya_single_over_transformers": single_ratio, "zaya_decode_over_transformers": decode_ratio,
                        "zaya_streams_total_tok_s": z_total, "zaya_streams_over_single": streams_ratio,
                        "ttft_p50_s": ttft_p50, "ttft_p99_s": ttft_p99},
            "agreement": agreement,
            "per_run": runs,
        }
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
