"""Writes the tokenizer fixtures of tests/fixtures/tokenizer/ with the pinned `tokenizers` library:

- corpus.txt: a deterministic mixed corpus of about 1.1 MB: Python's reStructuredText documentation (prose),
  Python standard library source (code), generated lines in many scripts (CJK, Arabic, Hebrew, Devanagari,
  Thai, Cyrillic, Greek, emoji with ZWJ sequences and skin tones, combining accents, ligatures, fullwidth
  forms), whitespace runs (tabs, runs of spaces, blank lines, \r\n endings), digits in several scripts, and
  the fixtures' added tokens in running text.
- Five tokenizers, each trained here by tokenizers' BpeTrainer on part of the corpus and saved by the
  library itself:
  - byte_level.json: Llama-3 style: NFC, Split on the Llama-3 regex + ByteLevel without regex, BPE with
    ignore_merges, ByteLevel decoder; special and non-special added tokens with lstrip / rstrip /
    single_word / normalized flags.
  - gpt2.json: GPT-2 style: ByteLevel pre-tokenizer with its own regex and add_prefix_space, a normalizer
    Sequence of NFKC, Lowercase and a regex Replace, BPE with continuing_subword_prefix and
    end_of_word_suffix.
  - byte_fallback.json: Gemma-3 style, the tokenizer family of ZAYA1: Replace(" " -> "▁"), Split(" ",
    merged_with_previous), BPE with byte_fallback (<0x00>..<0xFF>), fuse_unk, a small vocabulary and a
    limited alphabet so that byte fallback is exercised; decoder Replace + ByteFallback + Fuse.
  - metaspace.json: Metaspace pre-tokenizer (prepend_scheme first, split) over byte_fallback's model,
    decoder Metaspace + ByteFallback + Fuse + Strip.
  - llama2.json: the legacy Llama-2 conversion over byte_fallback's model: normalizer Prepend("▁") +
    Replace(" " -> "▁"), no pre-tokenizer, decoder Replace + ByteFallback + Fuse + Strip.
- expected.safetensors: the corpus cut into documents ("chunks") of whole lines of at most 4096 bytes, each
  ending with "\n" (chunk_bytes: int64 byte offsets, n + 1 of them), and for each tokenizer <name>.ids
  (int32) and <name>.offsets (int64, where each chunk's ids start) from `encode_batch(chunks,
  add_special_tokens=False)`. byte_level and byte_fallback cover the whole corpus; the three others its
  first 262144 bytes (their chunks are a prefix of the list).
- cases.json: per tokenizer, short edge-case texts with their ids, decode results (with and without
  skip_special_tokens) of chosen id lists, id_to_token / token_to_id probes and the vocabulary size.
- components.json: small tokenizers, one per component option (every Split behavior with and without
  invert, empty regex matches, Digits, each Metaspace prepend scheme, normalizers, unk and byte-fallback
  paths, ignore_merges, added-token flags, decoders), each with its tokenizer.json, the ids of a list of
  tricky texts and decodes.

The corpus, its documents and the probes are deterministic. tokenizers' BpeTrainer is not quite (ties
between equally frequent pairs depend on its randomly seeded hash maps), so a rerun can train slightly
different gpt2 and component vocabularies; every expected id is always taken from the files written by the
same run.

Run: tools/reference/.venv/bin/python tools/reference/gen_tokenizer_fixtures.py
"""

import contextlib
import json
import os
import pathlib
import random

import numpy as np
import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

OUT = pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "tokenizer"
RST_DIR = pathlib.Path("/usr/share/doc/python3.11/html/_sources")
PY_DIR = pathlib.Path("/usr/lib/python3.11")
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CHUNK_LIMIT = 4096
PARTIAL_BYTES = 262144

SCRIPTS = {
    "chinese": "我们 今天 学习 中文 计算机 语言 模型 训练 数据 北京 上海 天气 很好 谢谢 你好 世界 人工智能 机器学习",
    "japanese": "こんにちは 世界 東京 ありがとう カタカナ ひらがな 日本語 の テキスト です ラーメン を 食べたい",
    "korean": "안녕하세요 세계 한국어 서울 감사합니다 컴퓨터 언어 모델 학습 데이터",
    "arabic": "مرحبا بالعالم اللغة العربية الحاسوب نموذج تعلم الآلة شكرا جزيلا كتاب",
    "hebrew": "שלום עולם שפה עברית מחשב תודה רבה ספר ירושלים",
    "hindi": "नमस्ते दुनिया हिन्दी भाषा संगणक धन्यवाद भारत मॉडल प्रशिक्षण क्षत्रिय",
    "thai": "สวัสดี ชาวโลก ภาษาไทย คอมพิวเตอร์ ขอบคุณ กรุงเทพ",
    "russian": "Привет мир русский язык компьютер спасибо Москва модель обучение ЁЛКА",
    "greek": "Γειά σου κόσμε ελληνικά γλώσσα ΟΔΥΣΣΕΥΣ σοφία λόγος",
    "accents": "café naïve résumé Ångström São Paulo Zürich İstanbul ıi straße ĳssel Œuvre",
    "decomposed": "cafe\u0301 nai\u0308ve re\u0301sume\u0301 A\u030angstro\u0308m \u0301lone e\u0323\u0302",
    "ligatures": "\ufb01nance \ufb02ow \u2163 \u00bd \u2075 \u33a1 \uff21\uff22\uff23 \uff11\uff12\uff13 \u2126 \u212b",
    "emoji": "😀 👍🏽 👨‍👩‍👧‍👦 🇫🇷 🇯🇵 ❤️ 🏳️‍🌈 🧑🏿‍💻 ✨ 🚀 🫩 🥲",
    "symbols": "∑ ∫ √ ≠ ≤ → ⇒ € £ ¥ © ® ™ § ¶ • … “quotes” ‘single’ «guillemets» — –",
    "invisible": "zero\u200bwidth no\u00a0break ideographic\u3000space soft\u00adhyphen join\u200dner bom\ufeffx",
    "digits": "٠١٢٣٤٥٦٧٨٩ ०१२३४५६७८९ ０１２３ 3.14159 1,000,000 2024-06-01 +1 (555) 010-9999",
}

# Added tokens of the fixtures, sprinkled through the corpus so that every flag is exercised.
INJECTED = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|mask|>", "Zaya", "<eos>", "<bos>",
            "<start_of_turn>", "<end_of_turn>", "<mask>", "<s>", "</s>", "[SEP]", "ﬁnance", " ::", "<pad>"]


def concatenated(paths, limit):
    """The files' text, cut after the last whole line that fits in `limit` bytes."""
    out, size = [], 0
    for path in paths:
        text = path.read_text(encoding="utf-8")
        out.append(text if text.endswith("\n") else text + "\n")
        size += len(out[-1].encode())
        if size > limit:
            break
    data = "".join(out).encode()[:limit]
    return data[: data.rfind(b"\n") + 1].decode()


def prose():
    return concatenated(sorted(RST_DIR.rglob("*.txt")), 600_000)


def code():
    return concatenated(sorted(PY_DIR.glob("*.py")), 190_000)


def generated_lines(rng):
    words = {name: text.split(" ") for name, text in SCRIPTS.items()}
    names = sorted(words)
    spaces = [" ", " ", " ", "  ", "   ", "\t", " \t ", "        ", "\u3000", "\u00a0"]
    lines = []
    for _ in range(1500):
        kind = rng.random()
        if kind < 0.06:
            lines.append("")
            continue
        if kind < 0.1:
            lines.append(rng.choice(["", " ", "\t", "   ", "\t\t", "    \t"]) * rng.randint(1, 6))
            continue
        parts = []
        for _ in range(rng.randint(3, 14)):
            r = rng.random()
            if r < 0.06:
                parts.append(rng.choice(INJECTED))
            elif r < 0.14:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
            elif r < 0.18:
                parts.append(rng.choice(["'s", "'ll", "'VE", "n't", "O'Neil", "l'été"]))
            else:
                parts.append(rng.choice(words[rng.choice(names)]))
            parts.append(rng.choice(spaces))
        line = "".join(parts)
        if rng.random() < 0.2:
            line = line.rstrip() + rng.choice([" ", "  ", "\t"])
        lines.append(line)
    out = []
    for line in lines:
        out.append(line + ("\r\n" if rng.random() < 0.15 else "\n"))
    return "".join(out)


def build_corpus():
    rng = random.Random(20240601)
    parts = [prose(), generated_lines(rng), code(), generated_lines(rng)]
    corpus = "".join(p if p.endswith("\n") else p + "\n" for p in parts)
    assert 1_048_576 < len(corpus.encode()) < 1_200_000, len(corpus.encode())
    return corpus


def chunk(corpus):
    """Documents of whole lines, at most CHUNK_LIMIT bytes unless a single line is longer."""
    data = corpus.encode()
    chunks, start = [], 0
    while start < len(data):
        end = start
        while end < len(data):
            nl = data.find(b"\n", end)
            nl = len(data) - 1 if nl < 0 else nl
            if end > start and nl + 1 - start > CHUNK_LIMIT:
                break
            end = nl + 1
        chunks.append((start, end))
        start = end
    return data, chunks


def train(tokenizer, trainer, lines):
    tokenizer.train_from_iterator(lines, trainer=trainer, length=len(lines))


def byte_level(train_lines):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=6000, min_frequency=2, show_progress=False,
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    train(tok, trainer, train_lines)
    tok.add_special_tokens([AddedToken("<|eot_id|>", special=True, normalized=False),
                            AddedToken("<pad>", special=True, normalized=False)])
    tok.add_tokens([
        AddedToken("<|mask|>", special=False, lstrip=True, rstrip=True, normalized=False),
        AddedToken("Zaya", special=False, single_word=True, normalized=True),
        AddedToken("ﬁnance", special=False, normalized=True),
        AddedToken("[SEP]", special=True, lstrip=True, normalized=False),
    ])
    return tok


def gpt2(train_lines):
    tok = Tokenizer(models.BPE(continuing_subword_prefix="##", end_of_word_suffix="</w>"))
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase(),
                                           normalizers.Replace(Regex(r"\r\n"), "\n")])
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  special_tokens=["<|endoftext|>"], continuing_subword_prefix="##",
                                  end_of_word_suffix="</w>", initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    train(tok, trainer, train_lines)
    tok.add_tokens([AddedToken("Zaya", single_word=True, normalized=True),
                    AddedToken("<eos>", special=True, rstrip=True, normalized=False)])
    return tok


def byte_fallback_model(train_lines):
    """A SentencePiece-like BPE: words start with "▁", rare characters are left to byte fallback."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    trainer = trainers.BpeTrainer(vocab_size=1500, min_frequency=2, show_progress=False, limit_alphabet=160)
    train(tok, trainer, train_lines)
    trained = json.loads(tok.to_str())["model"]
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
    vocab = {t: i for i, t in enumerate(specials)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for token, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        if token not in vocab:
            vocab[token] = len(vocab)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]]
    return vocab, merges


def spm_tokenizer(vocab, merges, normalizer, pre_tokenizer, decoder, extra):
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoder
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in extra])
    return tok


def byte_fallback(vocab, merges):
    tok = spm_tokenizer(vocab, merges, normalizers.Replace(" ", "▁"),
                        pre_tokenizers.Split(" ", behavior="merged_with_previous"),
                        decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]),
                        ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"])
    tok.add_tokens([AddedToken(" ::", normalized=True), AddedToken("[SEP]", rstrip=True, normalized=False)])
    return tok


def metaspace(vocab, merges):
    return spm_tokenizer(vocab, merges, None,
                         pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True),
                         decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="first"),
                                            decoders.ByteFallback(), decoders.Fuse(),
                                            decoders.Strip(content=" ", left=1, right=0)]),
                         ["<unk>", "<s>", "</s>"])


def llama2(vocab, merges):
    return spm_tokenizer(vocab, merges,
                         normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]), None,
                         decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                            decoders.Strip(content=" ", left=1, right=0)]),
                         ["<unk>", "<s>", "</s>"])


EDGE_TEXTS = [
    "", " ", "  ", "\n", "\r\n", "\t\t x", "a", "Hello world", " Hello  world ", "Hello\n\nworld\n",
    "<|begin_of_text|>Hello<|end_of_text|>", "x <|mask|> y", "x<|mask|>y", "  <|mask|>  ", "[SEP]  tail",
    "pre   [SEP]", "Zaya is here", "aZaya", "Zaya_x", "Zaya!", "zaya", "<eos>   after", "<s>Hello</s>",
    "Hello <s> world", "<s> lead", "ﬁnance finance", "İstanbul ΣΑΣ", "e\u0301 \u0301x", "👨‍👩‍👧‍👦🇫🇷",
    "\u00a0\u3000 spaces", "12345678 ١٢٣", "don't I'LL we've", "<start_of_turn>user\nhi<end_of_turn>",
    "a ::b", " :: ", "<0x41>", "▁▁x", "\ufeffbom", "tab\tsep", "日本語のテキスト", "<pad><pad>",
]


def decode_probes(tok, rng):
    size = tok.get_vocab_size(with_added_tokens=True)
    added = sorted(tok.get_added_tokens_decoder())
    lists = [
        [], list(range(0, 40)), added + [size // 2, size // 3], [size + 5, 0, size - 1],
        [rng.randrange(size) for _ in range(60)], added[:3] + [rng.randrange(size) for _ in range(10)] + added[-2:],
    ]
    vocab = tok.get_vocab()
    byte_ids = [vocab[f"<0x{b:02X}>"] for b in (0xE6, 0x97, 0xA5, 0xFF, 0x41, 0xC3) if f"<0x{b:02X}>" in vocab]
    if byte_ids:
        lists.append(byte_ids + [vocab.get("▁", 0)] + byte_ids[:3] + byte_ids[-2:])
    out = []
    for ids in lists:
        for skip in (False, True):
            out.append({"ids": ids, "skip_special_tokens": skip, "text": tok.decode(ids, skip_special_tokens=skip)})
    return out


COMPONENT_TEXTS = [
    "", " ", "x", "Hello world", "  Hello,  world!  ", "hello\nworld\n\n", "a,b.c!d?e", "abc abbb ab b",
    "xxa axx xx", "123 4567 89", "٣٤ ½ Ⅻ ４２", "İIıi ΣΑΣ ß ﬁ", "e\u0301 \u0301 cafe\u0301 café", "日本語 テキスト",
    "😀👍🏽", "<s>Hello</s>", "Hello <s> world", " <s> x", "<s>", "<a><b>c<a>", "ab cab ab_ ab1 éab abé ab",
    "[L]x   [L]y", "x   [R]   y  [R]", "a [LR] b  [LR]", "Yes yes YES", "tab\tx", "\u00a0nbsp\u3000", "▁▁a ▁b",
    "  leading", "trailing  ", "\r\n", "Ünïcödé wörds", "<0x41> raw", "1.5 and 10,000",
]


def component_base(kind, sample):
    """A small trained model to hang the components on: 'spm' (words start with ▁, <0xXX> byte tokens),
    'byte' (byte-level alphabet) or 'prefix' (continuing_subword_prefix and end_of_word_suffix, small
    alphabet so that unknown characters occur)."""
    lines = sample.splitlines(keepends=True)
    if kind == "byte":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    elif kind == "spm":
        tok = Tokenizer(models.BPE())
        tok.normalizer = normalizers.Replace(" ", "▁")
        tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
        trainer = trainers.BpeTrainer(vocab_size=300, show_progress=False, limit_alphabet=60)
    else:
        tok = Tokenizer(models.BPE(continuing_subword_prefix="##", end_of_word_suffix="</w>"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        trainer = trainers.BpeTrainer(vocab_size=250, show_progress=False, limit_alphabet=40,
                                      continuing_subword_prefix="##", end_of_word_suffix="</w>")
    tok.train_from_iterator(lines, trainer=trainer)
    model = json.loads(tok.to_str())["model"]
    if kind in ("spm", "prefix"):
        vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
        if kind == "spm":
            for b in range(256):
                vocab[f"<0x{b:02X}>"] = len(vocab)
        for token, _ in sorted(model["vocab"].items(), key=lambda kv: kv[1]):
            vocab.setdefault(token, len(vocab))
        model["vocab"] = vocab
    return model


def component_tokenizers(sample):
    spm, byte, prefix = (component_base(k, sample) for k in ("spm", "byte", "prefix"))
    split_regex = {"Regex": r"\s+|[,.!?]"}
    fallback = dict(spm, byte_fallback=True, unk_token="<unk>", fuse_unk=True)
    spm_decoder = {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                                                    {"type": "ByteFallback"}, {"type": "Fuse"}]}
    byte_decoder = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}

    def metaspace(scheme, split=True):
        return {"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}

    def added(content, special=False, **flags):
        return dict({"content": content, "single_word": False, "lstrip": False, "rstrip": False,
                     "normalized": not special, "special": special}, **flags)

    specials = [added("<s>", True), added("</s>", True)]
    out = {}

    def add(name, model, pre=None, norm=None, decoder=None, tokens=None):
        with_ids, next_id = [], len(model["vocab"])
        for token in tokens or specials:
            known = model["vocab"].get(token["content"])
            with_ids.append(dict(token, id=next_id if known is None else known))
            next_id += known is None
        out[name] = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": with_ids,
                     "normalizer": norm, "pre_tokenizer": pre, "post_processor": None, "decoder": decoder,
                     "model": dict(model, type="BPE")}

    for behavior in ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"):
        for invert in (False, True):
            add(f"split_{behavior}_{'inverted' if invert else 'plain'}", fallback,
                {"type": "Split", "pattern": split_regex, "behavior": behavior, "invert": invert}, decoder=spm_decoder)
    add("split_empty_literal", fallback, {"type": "Split", "pattern": {"String": ""}, "behavior": "Isolated",
                                          "invert": False})
    add("split_empty_matches", fallback, {"type": "Split", "pattern": {"Regex": "x*"}, "behavior": "Isolated",
                                          "invert": False})
    add("split_lookahead", fallback, {"type": "Split", "pattern": {"Regex": "(?=a)"}, "behavior": "MergedWithNext",
                                      "invert": False})
    add("digits_individual", fallback, {"type": "Digits", "individual_digits": True})
    add("digits_contiguous", fallback, {"type": "Digits", "individual_digits": False})
    for scheme in ("always", "first", "never"):
        for split in (True, False):
            add(f"metaspace_{scheme}_{'split' if split else 'whole'}", fallback, metaspace(scheme, split),
                decoder={"type": "Sequence", "decoders": [metaspace(scheme), {"type": "ByteFallback"},
                                                          {"type": "Fuse"}]})
    add("digits_then_metaspace_first", fallback,
        {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": r"\d+"}, "behavior": "Isolated",
                                                "invert": False}, metaspace("first", False)]})
    add("prepend_split_metaspace_first", fallback,
        {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"String": "▁"}, "behavior": "Isolated",
                                                "invert": False}, metaspace("first")]},
        norm={"type": "Prepend", "prepend": "▁"})
    add("strip_metaspace_first", fallback, metaspace("first"),
        norm={"type": "Strip", "strip_left": True, "strip_right": True})
    add("strip_left_only", fallback, None, norm={"type": "Strip", "strip_left": True, "strip_right": False})
    add("replace_lookahead", fallback, metaspace("first"),
        norm={"type": "Replace", "pattern": {"Regex": "(?=b)"}, "content": "_"})
    add("replace_runs", fallback, metaspace("first"),
        norm={"type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"Regex": "[a-z]b+"}, "content": "X"},
                                                  {"type": "Replace", "pattern": {"String": "l"}, "content": ""}]})
    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        add(f"normalizer_{form}", fallback, metaspace("always"),
            norm={"type": "Sequence", "normalizers": [{"type": form}, {"type": "Lowercase"}]})
    add("llama2_legacy", fallback, None,
        norm={"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                                                  {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
        decoder={"type": "Sequence", "decoders": spm_decoder["decoders"] + [
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})
    whitespace = {"type": "Split", "pattern": {"Regex": r"\w+|[^\w\s]+"}, "behavior": "Removed", "invert": True}
    for fuse in (True, False):
        add(f"unk_{'fused' if fuse else 'separate'}", dict(prefix, unk_token="<unk>", fuse_unk=fuse), whitespace)
    partial = dict(fallback, vocab={t: i for t, i in fallback["vocab"].items()
                                    if t not in ("<0xE6>", "<0x97>", "<0xF0>", "<0xC3>")})
    for fuse in (True, False):
        add(f"byte_fallback_partial_{'fused' if fuse else 'separate'}", dict(partial, fuse_unk=fuse),
            metaspace("always"), decoder=spm_decoder)
    add("no_unk_token", dict(prefix, unk_token=None), whitespace)
    for ignore in (True, False):
        add(f"byte_level_ignore_merges_{ignore}", dict(byte, ignore_merges=ignore),
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            decoder=byte_decoder)
    add("byte_level_prefix_no_regex", byte, {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                             "use_regex": False}, decoder=byte_decoder)
    flagged = [added("<a>", True), added("<a><b>", False, normalized=False), added("ab", single_word=True),
               added("[L]", lstrip=True, normalized=False), added("[R]", rstrip=True, normalized=False),
               added("[LR]", True, lstrip=True, rstrip=True), added("Yes"), added("<s>", True),
               added(" x", normalized=False, lstrip=True)]
    add("added_flags_byte_level", byte, {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                         "use_regex": True}, decoder=byte_decoder, tokens=flagged)
    add("added_flags_lowercase", fallback, metaspace("first"), norm={"type": "Lowercase"}, decoder=spm_decoder,
        tokens=flagged)
    add("decoder_strip", fallback, metaspace("always"),
        decoder={"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Strip", "content": "▁",
                                                                            "start": 2, "stop": 1}]})
    add("decoder_replace_regex", fallback, metaspace("always"),
        decoder={"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"Regex": "▁+"}, "content": "_"},
                                                  {"type": "ByteFallback"}, {"type": "Fuse"}]})
    add("no_decoder", fallback, metaspace("always"))
    return out


@contextlib.contextmanager
def quiet_stderr():
    """Hides what tokenizers prints when it panics (it then raises, which the caller records)."""
    saved = os.dup(2)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def components(sample, rng):
    out = []
    for name, config in component_tokenizers(sample).items():
        tok = Tokenizer.from_str(json.dumps(config))
        saved = json.loads(tok.to_str())  # the file as tokenizers writes it
        encoded = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in COMPONENT_TEXTS]
        size = tok.get_vocab_size(with_added_tokens=True)
        lists = [e["ids"] for e in encoded[2::5]] + [[rng.randrange(size + 3) for _ in range(25)]]
        decoded = []
        for ids in lists:
            for skip in (False, True):
                try:
                    with quiet_stderr():
                        text = tok.decode(ids, skip)
                except BaseException:  # tokenizers panics (Strip cutting past a token); zaya must not crash
                    text = None
                decoded.append({"ids": ids, "skip_special_tokens": skip, "text": text})
        out.append({"name": name, "tokenizer": saved, "encode": encoded, "decode": decoded})
    return out


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    corpus = build_corpus()
    (OUT / "corpus.txt").write_bytes(corpus.encode())
    data, chunks = chunk(corpus)
    lines = corpus.splitlines(keepends=True)
    train_lines = lines[: len(lines) * 2 // 3]

    vocab, merges = byte_fallback_model(train_lines)
    builders = {
        "byte_level": lambda: byte_level(train_lines),
        "gpt2": lambda: gpt2(train_lines),
        "byte_fallback": lambda: byte_fallback(vocab, merges),
        "metaspace": lambda: metaspace(vocab, merges),
        "llama2": lambda: llama2(vocab, merges),
    }
    full = {"byte_level", "byte_fallback"}
    tensors = {"chunk_bytes": torch.tensor([c[0] for c in chunks] + [chunks[-1][1]], dtype=torch.int64)}
    cases = {}
    rng = random.Random(7)
    for name, build in builders.items():
        build().save(str(OUT / f"{name}.json"))
        tok = Tokenizer.from_file(str(OUT / f"{name}.json"))  # the tokenizer as the file describes it
        used = chunks if name in full else [c for c in chunks if c[1] <= PARTIAL_BYTES]
        texts = [data[b:e].decode() for b, e in used]
        encodings = tok.encode_batch(texts, add_special_tokens=False)
        ids = np.concatenate([np.asarray(e.ids, dtype=np.int32) for e in encodings])
        offsets = np.cumsum([0] + [len(e.ids) for e in encodings]).astype(np.int64)
        tensors[f"{name}.ids"] = torch.from_numpy(ids)
        tensors[f"{name}.offsets"] = torch.from_numpy(offsets)
        vocab_map = tok.get_vocab(with_added_tokens=True)
        probe_tokens = sorted(vocab_map, key=lambda t: vocab_map[t])[:: max(1, len(vocab_map) // 40)]
        cases[name] = {
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "encode": [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in EDGE_TEXTS],
            "decode": decode_probes(tok, rng) + [
                {"ids": encodings[i].ids, "skip_special_tokens": s, "text": tok.decode(encodings[i].ids, s)}
                for i in (len(encodings) // 2,) for s in (False, True)],
            "token_to_id": [{"token": t, "id": tok.token_to_id(t)} for t in probe_tokens + ["<not a token>"]],
            "id_to_token": [{"id": i, "token": tok.id_to_token(i)}
                            for i in list(range(0, tok.get_vocab_size(True), 97)) + [10 ** 6]],
        }
        print(f"{name}: {len(used)} chunks, {len(ids)} ids, vocab {cases[name]['vocab_size']}")
    save_file(tensors, OUT / "expected.safetensors", metadata={"origin": "tokenizers 0.23.3 encode_batch"})
    (OUT / "components.json").write_text(
        json.dumps(components(corpus[:20000], random.Random(11)), ensure_ascii=False) + "\n", encoding="utf-8")
    (OUT / "cases.json").write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
