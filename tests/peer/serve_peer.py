"""Peer test: `zaya serve` (the OpenAI-compatible completions server) and `zaya eval` (multiple-choice and text
scoring) against transformers and lm-evaluation-harness, on one small model with a trained byte-level tokenizer.

What is compared, and why the bounds:
- log-likelihoods (echoed prompt logprobs, lm-eval's per-choice log-likelihoods, zaya eval's per-choice
  log-likelihoods) against transformers in float32: within 1e-3 absolute. zaya computes in float32 too; its
  per-token log-probabilities differ from transformers' by summation order only (measured ~1e-5 on a choice's
  sum), so 1e-3 leaves two orders of margin while an off-by-one token, another split of context and
  continuation or a missing sliding window moves a sum by far more;
- a text longer than the context, in lm-eval's rolling windows: within 1e-5 per token (a float32 sum over
  ~1200 tokens rounds by ~1e-3 by itself; windows of another shape move it by tenths);
- chosen answers and greedy text: identical, except after a step where the reference's two best candidates are
  within 2e-3 of each other (either is right there; such items are counted, not failed);
- the server's HTTP surface (openai client, streaming, errors, auth, concurrency, a client that disconnects,
  /health /metrics /v1/models, vLLM's /tokenize /detokenize /tokenizer_info): exact.

lm-eval (tasks in tests/peer/lm_eval_tasks/, fixtures in tests/fixtures/eval/) runs with `hf` (transformers
in-process: the reference) and with `local-completions` against the server (tokenizer backend `remote`: the
server's /tokenize), which must agree per choice; `zaya eval` on the same fixtures must agree with the `hf` run
(lm_eval_peer.py: the model, the reference, the lm-eval runs and the zaya eval checks).

The model: the tiny preset trained for 200 steps on text.txt by transformers, so that greedy text depends on
the prompt (an untrained model repeats one token whatever it reads).

Usage: serve_peer.py ZAYA_BINARY [DEVICE]   (the server's and zaya eval's --device, cpu by default; the
emulated GPU with the zaya-emulated binary: the same checks with the GPU backend's decoding)
"""

import concurrent.futures
import ctypes
import json
import math
import pathlib
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading

import openai
import requests
import torch
from openai.types import Completion

from lm_eval_peer import (FIXTURES, LL_TOL, TASKS, TEXT_TASK, Checks, Reference, build_model, check_lm_eval_tasks,
                          check_zaya_eval, compare_lls, near_tie, run_lm_eval)

API_KEY = "zaya-test-key"
PROMPTS = ["The old mill stood at the bend of the", "In the spring the river rose, and the", "The miller kept a",
           "When summer came the river fell again.", "The harvest always arrived at", "In winter the river froze",
           "His daughter weighed the grain and", "Years later, when a new road was built"]


# ----------------------------------------------------------------------------------------------------------
# The server


def _die_with_parent():
    # The servers must not outlive this test, even when it is killed (ctest's TIMEOUT).
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Server:
    """`zaya serve` on a free port, ready once it prints `zaya serve: listening on http://HOST:PORT`."""

    READY = re.compile(r"zaya serve: listening on http://[0-9.]+:(\d+)")

    def __init__(self, zaya, model_dir, device, *extra):
        self.lines = []
        self.port = None
        self._ready = threading.Event()
        self.proc = subprocess.Popen([str(zaya), "serve", "--model", str(model_dir), "--host", "127.0.0.1",
                                      "--port", "0", "--device", device, *extra], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace",
                                     preexec_fn=_die_with_parent)
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            if self.port is None and (m := self.READY.search(line)):
                self.port = int(m.group(1))
                self._ready.set()
        self._ready.set()

    def wait_ready(self, timeout=120):
        if not self._ready.wait(timeout) or self.port is None:
            raise RuntimeError(f"no `zaya serve: listening on` line within {timeout} s (exit code "
                               f"{self.proc.poll()}); stderr ends: " + " | ".join(self.lines[-10:]))
        return self.port

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def client(self, api_key="unused", timeout=120):
        return openai.OpenAI(base_url=self.url + "/v1", api_key=api_key, max_retries=0, timeout=timeout)

    def post(self, path, body, headers=None, timeout=60):
        data = body if isinstance(body, bytes) else json.dumps(body)
        return requests.post(self.url + path, data=data, timeout=timeout,
                             headers={"Content-Type": "application/json", **(headers or {})})

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def is_error_body(r):
    try:
        err = r.json()["error"]
        return isinstance(err["message"], str) and bool(err["message"]) and isinstance(err["type"], str)
    except (ValueError, KeyError, TypeError):
        return False


def check_endpoints(checks, server):
    r = requests.get(server.url + "/health", timeout=30)
    checks.check(r.status_code == 200, "GET /health is 200", f"status {r.status_code}")
    r = requests.get(server.url + "/v1/models", timeout=30)
    body = r.json()
    model_id = body["data"][0]["id"]
    checks.check(r.status_code == 200 and body["object"] == "list" and body["data"][0]["object"] == "model",
                 "GET /v1/models lists the model", f"id {model_id!r}")
    listed = [m.id for m in server.client().models.list()]
    checks.check(listed == [model_id], "the openai client lists it", f"{listed}")
    return model_id


def check_tokenizer_endpoints(checks, server, ref):
    text = PROMPTS[0] + " river, where the water slowed."
    want = ref.encode(text)
    r = server.post("/tokenize", {"prompt": text, "add_special_tokens": False, "return_token_strs": True})
    body = r.json()
    checks.check(r.status_code == 200 and body["tokens"] == want and body["count"] == len(want)
                 and body["max_model_len"] == ref.context
                 and body.get("token_strs") == ref.tok.convert_ids_to_tokens(want),
                 "POST /tokenize: vLLM's {tokens, count, max_model_len, token_strs}, transformers' tokens",
                 f"{len(want)} tokens")
    eos = server.post("/tokenize", {"prompt": ref.tok.eos_token, "add_special_tokens": False}).json()["tokens"]
    checks.check(eos == [ref.tok.eos_token_id], "POST /tokenize reads a special token's text as its id (lm-eval's "
                 "remote tokenizer finds eos_token_id so)", f"{eos}")
    r = server.post("/detokenize", {"tokens": want})
    checks.check(r.status_code == 200 and r.json()["prompt"] == text, "POST /detokenize: {prompt}, the text back")
    r = requests.get(server.url + "/tokenizer_info", timeout=30)
    info = r.json()
    got = {k: info.get(k) for k in ("tokenizer_class", "eos_token", "bos_token")}
    checks.check(r.status_code == 200 and isinstance(got["tokenizer_class"], str)
                 and got["eos_token"] == ref.tok.eos_token and got["bos_token"] == ref.tok.bos_token,
                 "GET /tokenizer_info: tokenizer_class, eos_token and bos_token as in tokenizer_config.json", f"{got}")
    from lm_eval.utils import check_remote_tokenizer_support

    checks.check(check_remote_tokenizer_support(server.url + "/v1/completions"),
                 "lm-eval detects the remote tokenizer")


def check_completion_fields(checks, server, ref, model_id):
    r = server.post("/v1/completions", {"model": model_id, "prompt": PROMPTS[0], "max_tokens": 8, "temperature": 0})
    body = r.json()
    try:
        Completion.model_validate(body)
        invalid = ""
    except ValueError as e:
        invalid = " ".join(str(e).split())
    usage = body.get("usage") or {}
    checks.check(not invalid and r.status_code == 200 and [c["index"] for c in body["choices"]] == [0]
                 and usage["prompt_tokens"] == len(ref.encode(PROMPTS[0])) and 1 <= usage["completion_tokens"] <= 8
                 and usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"],
                 "a completion validates as openai.types.Completion: id, object, created, model, "
                 "choices[index, text, logprobs, finish_reason], usage", invalid or f"usage {usage}")


def check_generation(checks, server, ref, model_id):
    """Greedy text, by text and by token ids, one prompt and several, n > 1, seeded sampling; returns each
    prompt's greedy choice."""
    client = server.client()

    def complete(prompt, **kw):
        return client.completions.create(model=model_id, prompt=prompt, max_tokens=16, **kw).choices

    greedy = {p: complete(p, temperature=0)[0] for p in PROMPTS}
    p0 = PROMPTS[0]
    checks.check(complete(p0, temperature=0)[0].text == greedy[p0].text, "temperature 0 is deterministic",
                 repr(greedy[p0].text))
    mismatched, ties = [], 0
    for p in PROMPTS:
        want, finish = ref.greedy(ref.encode(p), 16)
        got = greedy[p]
        ties += finish is None
        if not (got.text.startswith(want) if finish is None else (got.text, got.finish_reason) == (want, finish)):
            mismatched.append(f"{p!r}: zaya {got.text!r} ({got.finish_reason}), transformers {want!r} ({finish})")
    checks.check(not mismatched, f"greedy text and finish_reason are transformers' for {len(PROMPTS)} prompts",
                 f"{ties} compared up to a near-tie" + "".join("; " + m for m in mismatched))
    checks.check(complete(ref.encode(p0), temperature=0)[0].text == greedy[p0].text,
                 "a token-id prompt continues as its text does")
    pair = PROMPTS[:2]
    listed = complete(pair, temperature=0)
    checks.check(sorted(c.index for c in listed) == [0, 1]
                 and all(c.text == greedy[pair[c.index]].text for c in listed), "a list of prompts: choice i continues "
                 "prompt i")
    both = complete(pair, n=2, temperature=0)
    checks.check(sorted(c.index for c in both) == [0, 1, 2, 3]
                 and all(c.text == greedy[pair[c.index // 2]].text for c in both),
                 "n=2 over two prompts: choices 2i and 2i+1 continue prompt i")
    sampled = [[c.text for c in sorted(complete(p0, n=2, temperature=1.0, seed=11), key=lambda c: c.index)]
               for _ in range(2)]
    checks.check(len(sampled[0]) == 2 and sampled[0] == sampled[1], "sampling with a seed repeats itself",
                 repr(sampled[0]))
    return greedy


def check_streaming(checks, server, model_id, greedy):
    p0 = PROMPTS[0]
    chunks = list(server.client().completions.create(model=model_id, prompt=p0, max_tokens=16, temperature=0,
                                                     stream=True))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    checks.check(text == greedy[p0].text and finals == [greedy[p0].finish_reason] and len({c.id for c in chunks}) == 1
                 and all(c.object == "text_completion" for c in chunks),
                 "a stream reassembles to the greedy text, with one id and one finish_reason at the end",
                 f"{len(chunks)} chunks")
    body = {"model": model_id, "prompt": p0, "max_tokens": 4, "temperature": 0, "stream": True}
    with requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=60) as r:
        events = [line for line in r.iter_lines(decode_unicode=True) if line]
    checks.check(r.headers.get("content-type", "").startswith("text/event-stream") and events
                 and all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]",
                 "the raw stream: text/event-stream, `data: {json}` events, the last `data: [DONE]`")


def top_logprobs_error(top, row, actual, k):
    """How far a top_logprobs dict is from transformers' row of log-probabilities: its best value from the row's
    maximum, and each value from the nearest of the row's k best or the actual token's (keys are token texts,
    so tokens that decode alike may share one)."""
    best = torch.topk(row, k).values.tolist() + [float(row[actual])]
    if not 1 <= len(top) <= k + 1:
        return math.inf
    return max([abs(max(top.values()) - best[0])] + [min(abs(v - b) for b in best) for v in top.values()])


def check_echo_logprobs(checks, server, ref, model_id):
    """Prompt scoring as lm-eval asks for it: echo, logprobs, max_tokens 1 (or 0)."""
    client = server.client()
    prompt = (FIXTURES / "text.txt").read_text()[:400]  # over the tiny preset's sliding window (64 tokens)
    ids = ref.encode(prompt)
    n, lp = len(ids), ref.logprobs(ids)
    c = client.completions.create(model=model_id, prompt=prompt, max_tokens=1, temperature=0, echo=True,
                                  logprobs=3).choices[0]
    lg = c.logprobs
    shape = (len(lg.token_logprobs) == len(lg.top_logprobs) == len(lg.tokens) == n + 1
             and lg.token_logprobs[0] is None and lg.top_logprobs[0] is None)
    checks.check(shape and "".join(lg.tokens[:n]) == prompt and c.text.startswith(prompt),
                 "echo with logprobs: one entry per prompt token and one generated, the first None; tokens join to "
                 "the prompt; text starts with it", f"{n} prompt tokens, {len(lg.token_logprobs)} entries")
    if not shape:
        return
    worst = max(abs(lg.token_logprobs[i] - float(lp[i - 1, ids[i]])) for i in range(1, n))
    worst = max(worst, abs(lg.token_logprobs[n] - float(lp[n - 1].max())))
    top = max(top_logprobs_error(lg.top_logprobs[i], lp[i - 1], ids[i], 3) for i in range(1, n))
    checks.check(worst <= LL_TOL and top <= LL_TOL, "echo with logprobs=3: token_logprobs and top_logprobs are "
                 "transformers' log_softmax, the generated token's too",
                 f"max |diff| {worst:.2e} and {top:.2e} (top_logprobs), bound {LL_TOL:g}")
    greedy_rows = [i for i in range(1, n) if int(lp[i - 1].argmax()) == ids[i] and not near_tie(lp[i - 1].tolist())]
    checks.check(greedy_rows and all(lg.token_logprobs[i] == max(lg.top_logprobs[i].values()) for i in greedy_rows),
                 "where the prompt token is the argmax, its token_logprob equals the top_logprobs maximum exactly "
                 "(lm-eval's is_greedy compares with ==)", f"{len(greedy_rows)} such tokens")
    if lg.text_offset is not None:
        checks.check(lg.text_offset[:n] == [len("".join(lg.tokens[:i])) for i in range(n)],
                     "text_offset: each token's character offset")
    zero = client.completions.create(model=model_id, prompt=prompt, max_tokens=0, echo=True, logprobs=1)
    zc = zero.choices[0]
    checks.check(zc.text == prompt and len(zc.logprobs.token_logprobs) == n and zero.usage.completion_tokens == 0
                 and max(abs(zc.logprobs.token_logprobs[i] - lg.token_logprobs[i]) for i in range(1, n)) <= 1e-6,
                 "max_tokens=0 with echo: just the prompt, scored")
    batch = [ref.encode(p) for p in PROMPTS[:3]]
    r = server.post("/v1/completions", {"model": model_id, "prompt": batch, "temperature": 0, "max_tokens": 1,
                                        "logprobs": 1, "seed": 1234, "echo": True})
    choices = sorted(r.json()["choices"], key=lambda ch: ch["index"])
    ok, worst = r.status_code == 200 and len(choices) == len(batch), 0.0
    for b, ch in zip(batch, choices):
        got, want = ch["logprobs"]["token_logprobs"], ref.logprobs(b)
        ok = ok and len(got) == len(b) + 1
        worst = max([worst] + [abs(got[i] - float(want[i - 1, b[i]])) for i in range(1, len(b))])
    checks.check(ok and worst <= LL_TOL, "lm-eval's batched loglikelihood request (token-id prompts of several "
                 "lengths): choice i scores prompt i", f"max |diff| {worst:.2e}")


def check_concurrency(checks, server, model_id, greedy):
    barrier = threading.Barrier(len(PROMPTS))

    def one(p):
        client = server.client(timeout=300)
        barrier.wait()
        return client.completions.create(model=model_id, prompt=p, max_tokens=16, temperature=0).choices[0].text

    with concurrent.futures.ThreadPoolExecutor(len(PROMPTS)) as pool:
        texts = list(pool.map(one, PROMPTS))
    differ = [p for p, t in zip(PROMPTS, texts) if t != greedy[p].text]
    checks.check(not differ, f"{len(PROMPTS)} concurrent clients each get the text they get alone",
                 f"differ: {differ}" if differ else "")


def check_disconnect(checks, server, model_id):
    body = json.dumps({"model": model_id, "prompt": PROMPTS[1], "max_tokens": 512, "temperature": 0,
                       "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        received = b""
        while b"data: " not in received and (chunk := sock.recv(4096)):
            received += chunk
    health = requests.get(server.url + "/health", timeout=30)
    r = server.post("/v1/completions", {"model": model_id, "prompt": PROMPTS[2], "max_tokens": 4, "temperature": 0},
                    timeout=30)
    checks.check(b"data: " in received and server.alive() and health.status_code == 200 and r.status_code == 200,
                 "a client drops a stream after its first event; the server then answers /health and a request "
                 "at once", f"/health {health.status_code}, completion {r.status_code}")


def check_errors(checks, server, ref, model_id):
    cases = [("malformed JSON", b'{"model": "x", "prompt": "Hi", '),
             ("a prompt longer than the context", {"model": model_id, "prompt": [5] * (ref.context + 10)}),
             ("negative max_tokens", {"model": model_id, "prompt": "Hi", "max_tokens": -1}),
             ("max_tokens of the wrong type", {"model": model_id, "prompt": "Hi", "max_tokens": "ten"}),
             ("temperature of the wrong type", {"model": model_id, "prompt": "Hi", "temperature": "hot"}),
             ("a prompt of the wrong type", {"model": model_id, "prompt": 5}),
             ("a token id outside the vocabulary", {"model": model_id, "prompt": [ref.model.config.vocab_size + 7]})]
    for what, body in cases:
        r = server.post("/v1/completions", body)
        checks.check(r.status_code == 400 and is_error_body(r), f"{what}: 400 with {{error: {{message, type}}}}",
                     f"status {r.status_code}, body {r.text[:160]!r}")
    try:
        server.client().completions.create(model=model_id, prompt="Hi", max_tokens=-1)
        raised = False
    except openai.BadRequestError:
        raised = True
    checks.check(raised, "the openai client raises BadRequestError for it")
    # What lm-eval sends: a task's extra generation fields as they are, `Authorization: Bearer ` when
    # OPENAI_API_KEY is unset, and the task's `until` strings plus the EOS text as `stop` (often more than four).
    r = server.post("/v1/completions", {"model": model_id, "prompt": "Hi", "max_tokens": 2, "temperature": 0,
                                        "seed": 1234, "some_backend_option": True},
                    headers={"Authorization": "Bearer "})
    checks.check(r.status_code == 200, "an unknown field and `Authorization: Bearer ` are accepted",
                 f"status {r.status_code}, {r.text[:160]!r}")
    r = server.post("/v1/completions", {"model": model_id, "prompt": "Hi", "max_tokens": 2, "temperature": 0,
                                        "stop": ["\n\n", "Question:", "</s>", "<|im_end|>", ref.tok.eos_token]})
    checks.check(r.status_code == 200, "five stop strings are accepted (lm-eval appends the EOS text to a task's "
                 "`until`)", f"status {r.status_code}, {r.text[:160]!r}")


def request_counters(text):
    """{name: value summed over labels} of the Prometheus counters whose name mentions requests."""
    kinds = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    out = {}
    for name, value in re.findall(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)", text, re.M):
        family = name.removesuffix("_total")
        if "request" in name and "counter" in (kinds.get(name), kinds.get(family)):
            out[name] = out.get(name, 0.0) + float(value)
    return out


def check_metrics(checks, server, model_id):
    before = requests.get(server.url + "/metrics", timeout=30)
    server.post("/v1/completions", {"model": model_id, "prompt": "Hi", "max_tokens": 1})
    after = request_counters(requests.get(server.url + "/metrics", timeout=30).text)
    grown = [n for n, v in after.items() if v > request_counters(before.text).get(n, 0.0)]
    checks.check(before.status_code == 200 and grown, "GET /metrics: Prometheus text with a requests counter, "
                 "which grows", f"request counters {sorted(after)}")


def check_auth(checks, zaya, model_dir, device, model_id):
    server = Server(zaya, model_dir, device, "--api-key", API_KEY)
    try:
        server.wait_ready()
        body = {"model": model_id, "prompt": "Hi", "max_tokens": 1}
        none = server.post("/v1/completions", body)
        wrong = server.post("/v1/completions", body, {"Authorization": "Bearer nope"})
        right = server.post("/v1/completions", body, {"Authorization": f"Bearer {API_KEY}"})
        checks.check(none.status_code == 401 and is_error_body(none) and wrong.status_code == 401
                     and right.status_code == 200, "--api-key: without the bearer token or with another, 401; with "
                     "it, 200", f"{none.status_code}, {wrong.status_code}, {right.status_code}")
        checks.check(server.client(api_key=API_KEY).completions.create(model=model_id, prompt="Hi", max_tokens=1),
                     "--api-key: the openai client with the key is served")
    finally:
        server.stop()


def check_server(checks, zaya, model_dir, device, ref, hf, servers):
    server = Server(zaya, model_dir, device)
    servers.append(server)
    port = checks.guard("zaya serve starts", lambda _: server.wait_ready())
    if port is None:
        return
    checks.check(True, "zaya serve starts and reports its port", f"port {port}")
    model_id = checks.guard("endpoints", check_endpoints, server)
    if model_id is None:
        return
    checks.guard("tokenizer endpoints", check_tokenizer_endpoints, server, ref)
    checks.guard("completion fields", check_completion_fields, server, ref, model_id)
    greedy = checks.guard("generation", check_generation, server, ref, model_id)
    if greedy is not None:
        checks.guard("streaming", check_streaming, server, model_id, greedy)
        checks.guard("concurrency", check_concurrency, server, model_id, greedy)
    checks.guard("echo logprobs", check_echo_logprobs, server, ref, model_id)
    checks.guard("disconnect", check_disconnect, server, model_id)
    checks.guard("errors", check_errors, server, ref, model_id)
    checks.guard("metrics", check_metrics, server, model_id)
    args = (f"model={model_id},base_url={server.url}/v1/completions,tokenizer_backend=remote,num_concurrent=1,"
            f"max_retries=1,max_length={ref.context}")
    remote = checks.guard("lm-eval local-completions runs",
                          lambda _: run_lm_eval("local-completions", args, 4, TASKS))
    if remote is not None:
        for task in TASKS:
            compare_lls(checks, f"lm-eval {task}, local-completions vs hf", [s["lls"] for s in remote[task]],
                        [s["lls"] for s in hf[task]])
    checks.check(server.alive(), "zaya serve is still running")
    server.stop()
    checks.guard("auth", check_auth, zaya, model_dir, device, model_id)


# ----------------------------------------------------------------------------------------------------------


def main():
    zaya = pathlib.Path(sys.argv[1]).resolve()
    device = sys.argv[2] if len(sys.argv) > 2 else "cpu"
    checks = Checks()
    servers = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            model_dir = build_model(zaya, tmp)
            ref = Reference(model_dir)
            hf = run_lm_eval("hf", f"pretrained={model_dir},dtype=float32,device=cpu", 1, [*TASKS, TEXT_TASK])
            check_lm_eval_tasks(checks, hf)
            check_server(checks, zaya, model_dir, device, ref, hf, servers)
            checks.guard("zaya eval", check_zaya_eval, zaya, model_dir, ref, hf, tmp, device)
    finally:
        for s in servers:
            s.stop()
        if checks.failed and servers and servers[0].lines:
            print("zaya serve's stderr ends:\n  " + "\n  ".join(servers[0].lines[-30:]))
    print(f"{checks.passed} passed, {checks.failed} failed")
    sys.exit(1 if checks.failed else 0)


if __name__ == "__main__":
    main()
