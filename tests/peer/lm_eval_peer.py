"""The lm-eval side of serve_peer.py: a small trained model with its transformers reference, lm-eval's runs on
the tasks of tests/peer/lm_eval_tasks/ (fixtures in tests/fixtures/eval/), and `zaya eval` against them.

zaya eval must agree with lm-eval's `hf` run per choice (within LL_TOL, see serve_peer.py's docstring for the
bounds); its acc_norm divides by the choice's length in characters, without the leading space, as lm-eval
does; its text perplexity follows lm-eval's loglikelihood_rolling (the first window read after the prefix
token, BOS else EOS; the last given as much context as fits).
"""

import json
import math
import os
import pathlib
import subprocess

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "eval"
TASK_DIR = ROOT / "tests" / "peer" / "lm_eval_tasks"
TASKS = {"zaya_hellaswag": ("hellaswag.jsonl", "hellaswag"), "zaya_arc": ("arc.jsonl", "arc"),
         "zaya_mmlu": ("mmlu.jsonl", "mmlu")}
TEXT_TASK = "zaya_text"  # text.txt as lm-eval's loglikelihood_rolling scores it
LL_TOL = 1e-3
TIE = 2e-3


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, ok, what, detail=""):
        ok = bool(ok)
        self.passed += ok
        self.failed += not ok
        print(f"{'ok' if ok else 'FAIL'}: {what}{f' ({detail})' if detail else ''}", flush=True)
        return ok

    def guard(self, what, fn, *args):
        """Runs a group of checks; an exception in it fails that group, and the next group still runs."""
        try:
            return fn(self, *args)
        except Exception as e:  # noqa: BLE001 - reported as a failure
            self.check(False, what, f"{type(e).__name__}: {e}")
            return None


def run(cmd, **kwargs):
    return subprocess.run([str(c) for c in cmd], check=True, capture_output=True, text=True, **kwargs)


# ----------------------------------------------------------------------------------------------------------
# The model and its reference


def build_model(zaya, tmp):
    """A 512-token tokenizer trained by zaya, the tiny preset initialised by zaya, then 200 AdamW steps on
    text.txt by transformers (an untrained model repeats one token whatever the prompt, which would hide a
    server that mixes up its sequences); saved by transformers."""
    tokenizer = tmp / "tokenizer.json"
    run([zaya, "tokenizer", "train", "--input", FIXTURES / "text.txt", ROOT / "tests/fixtures/tokenizer/corpus.txt",
         "--vocab-size", "512", "--output", tokenizer])
    model_dir = tmp / "model"
    # zaya init --tokenizer writes tokenizer.json and tokenizer_config.json beside the weights and takes the
    # special tokens' ids into config.json: transformers must load both as they are.
    run([zaya, "init", "--preset", "tiny", "--out", model_dir, "--seed", "7", "--tokenizer", tokenizer])
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if type(tok).__name__ != "PreTrainedTokenizerFast" and "TokenizersBackend" not in type(tok).__name__:
        raise RuntimeError(f"AutoTokenizer loaded {type(tok).__name__} from zaya's tokenizer files")
    if tok.decode(tok("The cat sat", add_special_tokens=False).input_ids) != "The cat sat":
        raise RuntimeError("AutoTokenizer does not round-trip text with zaya's tokenizer files")
    if (model.config.bos_token_id, model.config.eos_token_id) != (tok.bos_token_id, tok.eos_token_id):
        raise RuntimeError(f"config.json's bos/eos ids {model.config.bos_token_id}/{model.config.eos_token_id} "
                           f"are not the tokenizer's {tok.bos_token_id}/{tok.eos_token_id}")
    if model.config.vocab_size < len(tok):
        raise RuntimeError(f"the tiny preset's vocabulary ({model.config.vocab_size}) is smaller than the "
                           f"tokenizer's ({len(tok)})")
    ids = torch.tensor(tok((FIXTURES / "text.txt").read_text(), add_special_tokens=False).input_ids)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(200):
        starts = torch.randint(0, len(ids) - 129, (8,), generator=gen)
        batch = torch.stack([ids[s:s + 128] for s in starts])
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(model_dir)
    print(f"model: tiny preset, vocabulary {model.config.vocab_size}, context "
          f"{model.config.max_position_embeddings}, trained to loss {loss.item():.2f}", flush=True)
    return model_dir


class Reference:
    """transformers in float32: log-probabilities, and greedy continuations by whole forward passes (no
    decode cache)."""

    def __init__(self, model_dir):
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.context = self.model.config.max_position_embeddings
        eos = self.model.generation_config.eos_token_id
        self.eos = set(eos if isinstance(eos, list) else [eos])

    def encode(self, text):
        return self.tok(text, add_special_tokens=False).input_ids

    @torch.no_grad()
    def logprobs(self, ids):
        """[len(ids), vocab]: row i is the distribution of the token after ids[:i+1]."""
        return torch.log_softmax(self.model(input_ids=torch.tensor([ids])).logits[0].double(), dim=-1)

    def greedy(self, ids, max_new):
        """(text, finish_reason) greedy decoding gives; if a step's best two were nearly tied, only the text
        before it is certain: then (that text, None)."""
        ids, out = list(ids), []
        for _ in range(max_new):
            top = torch.topk(self.logprobs(ids)[-1], 2)
            if float(top.values[0] - top.values[1]) < TIE:
                return self.tok.decode(out, skip_special_tokens=True).rstrip("\ufffd"), None
            out.append(int(top.indices[0]))
            ids.append(out[-1])
            if out[-1] in self.eos:
                return self.tok.decode(out, skip_special_tokens=True), "stop"
        return self.tok.decode(out, skip_special_tokens=True), "length"


# ----------------------------------------------------------------------------------------------------------
# lm-eval and the fixtures


def load_fixture(name):
    with open(FIXTURES / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def expected_item(layout, doc):
    """(context, choice texts, label) as zaya eval reads a fixture line: continuation i is " " + choices[i]."""
    if layout == "hellaswag":
        return doc["ctx"], doc["endings"], doc["label"]
    context = "Question: " + doc["question"] + "\nAnswer:"
    if layout == "arc":
        return context, doc["choices"]["text"], doc["choices"]["label"].index(doc["answerKey"])
    return context, doc["choices"], doc["answer"]


def argmax(values):
    return max(range(len(values)), key=lambda i: values[i])


def near_tie(values):
    best = sorted(values, reverse=True)
    return len(best) > 1 and best[0] - best[1] < TIE


def run_lm_eval(model, model_args, batch_size, tasks):
    """Per multiple-choice task and document: the requests, each choice's log-likelihood and the target; for
    the text task, the file's rolling log-likelihood."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=str(TASK_DIR), include_defaults=False)
    results = lm_eval.simple_evaluate(model=model, model_args=model_args, tasks=list(tasks), task_manager=manager,
                                      log_samples=True, batch_size=batch_size, bootstrap_iters=0)
    out = {}
    for task in tasks:
        samples = sorted(results["samples"][task], key=lambda s: s["doc_id"])
        if task == TEXT_TASK:
            out[task] = float(samples[0]["filtered_resps"][0])
        else:
            out[task] = [{"arguments": [tuple(a) for a in s["arguments"]], "target": int(s["target"]),
                          "lls": [float(r[0]) for r in s["filtered_resps"]]} for s in samples]
    return out


def check_lm_eval_tasks(checks, hf):
    """The task YAMLs hand lm-eval exactly the contexts, continuations and labels zaya eval scores."""
    for task, (name, layout) in TASKS.items():
        want = []
        for doc in load_fixture(name):
            context, choices, label = expected_item(layout, doc)
            want.append(([(context, " " + c) for c in choices], label))
        got = [(s["arguments"], s["target"]) for s in hf[task]]
        checks.check(got == want, f"lm-eval task {task} scores the contexts, continuations and labels of {name}",
                     "" if got == want else f"first differing: {next(g for g, w in zip(got, want) if g != w)}")


def compare_lls(checks, what, got, want):
    """Per item: as many choices, each log-likelihood within LL_TOL, the same argmax (unless nearly tied)."""
    if len(got) != len(want) or any(len(g) != len(w) for g, w in zip(got, want)):
        checks.check(False, f"{what}: the same items and choices",
                     f"{[len(g) for g in got]} vs {[len(w) for w in want]}")
        return
    worst = max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w))
    checks.check(worst <= LL_TOL, f"{what}: log-likelihood per choice", f"max |diff| {worst:.2e}, bound {LL_TOL:g}")
    ties = [i for i, w in enumerate(want) if near_tie(w)]
    wrong = [i for i, (g, w) in enumerate(zip(got, want)) if i not in ties and argmax(g) != argmax(w)]
    checks.check(not wrong, f"{what}: chosen answer per item",
                 f"{len(got) - len(wrong) - len(ties)} identical, {len(ties)} near-ties not compared"
                 + (f", differing items {wrong}" if wrong else ""))


# ----------------------------------------------------------------------------------------------------------
# zaya eval


def check_zaya_eval(checks, zaya, model_dir, ref, hf, tmp, device="cpu"):
    out = tmp / "eval.json"
    cmd = [zaya, "eval", "--model", model_dir, "--device", device]
    for name, _ in TASKS.values():
        cmd += ["--task", FIXTURES / name]
    try:
        run(cmd + ["--text", FIXTURES / "text.txt", "--json", out], timeout=600)
    except subprocess.CalledProcessError as e:
        checks.check(False, "zaya eval runs", f"exit {e.returncode}: {e.stderr.strip()[-400:]}")
        return
    report = json.loads(out.read_text())
    by_file = {pathlib.Path(t["file"]).name: t for t in report["tasks"]}
    for task, (name, layout) in TASKS.items():
        entry = by_file.get(name)
        docs = load_fixture(name)
        shape = entry and entry["layout"] == layout and entry["items"] == len(docs) == len(entry["per_item"])
        if not checks.check(shape, f"zaya eval {name}: layout {layout}, {len(docs)} items",
                            f"{ {k: v for k, v in (entry or {}).items() if k != 'per_item'} }"):
            continue
        items = entry["per_item"]
        compare_lls(checks, f"zaya eval {name} vs lm-eval hf", [i["choice_loglikelihoods"] for i in items],
                    [s["lls"] for s in hf[task]])
        acc = acc_norm = 0
        consistent = True
        for item, doc in zip(items, docs):
            _, choices, label = expected_item(layout, doc)
            lls = item["choice_loglikelihoods"]
            consistent = consistent and item["label"] == label and item["predicted"] == argmax(lls)
            acc += argmax(lls) == label
            acc_norm += argmax([ll / len(c) for ll, c in zip(lls, choices)]) == label
        checks.check(consistent and math.isclose(entry["acc"], acc / len(docs))
                     and math.isclose(entry["acc_norm"], acc_norm / len(docs)),
                     f"zaya eval {name}: label, predicted = argmax, acc, and acc_norm over the choice's characters",
                     f"acc {entry['acc']} (want {acc / len(docs)}), acc_norm {entry['acc_norm']} "
                     f"(want {acc_norm / len(docs)})")
    check_zaya_eval_text(checks, ref, report.get("text", []), hf[TEXT_TASK])


def check_zaya_eval_text(checks, ref, entries, want):
    """text.txt is longer than the context: lm-eval's loglikelihood_rolling reads its first window after the
    prefix token (BOS, else EOS) and gives its last window as much context as fits."""
    entry = next((e for e in entries if pathlib.Path(e.get("file", "")).name == "text.txt"), None)
    if not checks.check(entry is not None, "zaya eval reports text.txt", f"{entries!r:.200}"):
        return
    text = (FIXTURES / "text.txt").read_text(encoding="utf-8")
    tokens, size = len(ref.encode(text)), len(text.encode("utf-8"))
    ll = entry.get("loglikelihood")
    if not checks.check(entry.get("tokens") == tokens and entry.get("bytes") == size and isinstance(ll, float)
                        and math.isclose(entry.get("perplexity", 0.0), math.exp(-ll / tokens), rel_tol=1e-9)
                        and math.isclose(entry.get("bits_per_byte", 0.0), -ll / (size * math.log(2)), rel_tol=1e-9),
                        "zaya eval text.txt: tokens, bytes, perplexity = exp(-ll/tokens), bits_per_byte = "
                        "-ll/(bytes ln 2)", f"{ {k: v for k, v in entry.items() if k != 'file'} }; want {tokens} "
                        f"tokens, {size} bytes"):
        return
    bound = 1e-5 * tokens
    if not checks.check(abs(ll - want) <= bound, "zaya eval text.txt: log-likelihood is lm-eval's "
                        "loglikelihood_rolling (hf)", f"zaya {ll:.4f}, lm-eval {want:.4f}, |diff| "
                        f"{abs(ll - want):.3g}, bound {bound:.3g}; {tokens} tokens, context {ref.context}"):
        ids = ref.encode(text)
        for prefix in ("bos", "eos"):
            for last in ("as much context as fits", "one token of context"):
                got = rolling_loglikelihood(ref, ids, getattr(ref.tok, f"{prefix}_token_id"), last.startswith("one"))
                print(f"  transformers, first window after {prefix}, last window with {last}: {got:.4f}")


def rolling_loglikelihood(ref, ids, prefix, short_last):
    """Windows of ref.context predicted tokens; the last reads either one token before it or as many as fit."""
    total = 0.0
    for start in range(0, len(ids), ref.context):
        end = min(start + ref.context, len(ids))
        first = 0 if start == 0 else start - 1 if short_last else max(0, end - ref.context - 1)
        window = ([prefix] if start == 0 else []) + ids[first:end]
        lp = ref.logprobs(window[:-1])
        offset = len(window) - 1 - (end - start)
        total += sum(float(lp[offset + j, ids[start + j]]) for j in range(end - start))
    return total
