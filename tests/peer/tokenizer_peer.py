"""Peer test: a tokenizer trained by `zaya tokenizer train` loads in the Python `tokenizers` library and
encodes held-out text there exactly as `zaya tokenizer encode` does; and on random text built from
troublesome characters, zaya's ids equal tokenizers' for the fixture tokenizers as well.

Usage: tokenizer_peer.py ZAYA_BINARY FIXTURE_DIR (tests/fixtures/tokenizer)
"""

import json
import pathlib
import random
import subprocess
import sys
import tempfile

from tokenizers import Tokenizer

PIECES = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "'s", "'LL", "\u017f", "a", "Zaya", "hello", "é",
          "e\u0301", "\u0301", "中文", "テスト", "한국어", "مرحبا", "שלום", "हिन्दी", "ไทย", "😀", "👍🏽", "👨‍👩‍👧",
          "12", "3456", "٣٤", "½", "Ⅻ", ".", ",", "!!", "--", "$", "\u200d", "\ufeff", "ﬁ", "İ", "ß", "▁", "<eos>",
          "<s>", "</s>", "<|endoftext|>", "<pad>", "[SEP]", "<|mask|>", "<start_of_turn>", "::", "<0x41>"]


def zaya_ids(zaya, tokenizer, text_file):
    out = subprocess.run([zaya, "tokenizer", "encode", "--tokenizer", str(tokenizer), "--file", str(text_file),
                          "--json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def random_text(rng, pieces):
    return "".join(rng.choice(PIECES) for _ in range(pieces))


def compare(name, zaya, tokenizer_path, text, tmp):
    text_file = tmp / "text.txt"
    text_file.write_bytes(text.encode())
    ours = zaya_ids(zaya, tokenizer_path, text_file)
    peer = Tokenizer.from_file(str(tokenizer_path)).encode(text, add_special_tokens=False).ids
    ok = ours == peer
    if not ok:
        first = next((i for i, (a, b) in enumerate(zip(ours, peer)) if a != b), min(len(ours), len(peer)))
        print(f"  first difference at token {first}: zaya {ours[first:first + 8]} tokenizers {peer[first:first + 8]}")
    print(f"{'ok' if ok else 'FAIL'}: {name}: {len(peer)} tokens from {len(text.encode())} bytes")
    return ok


def main():
    zaya, fixtures = sys.argv[1], pathlib.Path(sys.argv[2])
    corpus = (fixtures / "corpus.txt").read_text(encoding="utf-8")
    lines = corpus.splitlines(keepends=True)
    cut = len(lines) * 6 // 10
    train_text, held_out = "".join(lines[:cut]), "".join(lines[cut:])
    rng = random.Random(3)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        (tmp / "train").mkdir()
        (tmp / "train" / "part1.txt").write_text(train_text[: len(train_text) // 2], encoding="utf-8")
        (tmp / "train" / "nested").mkdir()
        (tmp / "train" / "nested" / "part2.md").write_text(train_text[len(train_text) // 2:], encoding="utf-8")
        trained = tmp / "trained.json"
        subprocess.run([zaya, "tokenizer", "train", "--input", str(tmp / "train"), "--vocab-size", "3000",
                        "--output", str(trained), "--special", "<pad>", "<bos>", "<eos>", "<unk>", "<|endoftext|>"],
                       check=True, capture_output=True)
        peer = Tokenizer.from_file(str(trained))
        if peer.get_vocab_size(with_added_tokens=True) != 3000 or peer.token_to_id("<eos>") != 2:
            print("FAIL: trained tokenizer: unexpected vocabulary in tokenizers")
            failures += 1
        failures += not compare("trained, held-out text", zaya, trained, held_out, tmp)
        failures += not compare("trained, random text", zaya, trained, random_text(rng, 20000), tmp)
        decoded = peer.decode(peer.encode(held_out, add_special_tokens=False).ids, skip_special_tokens=False)
        if decoded != held_out:
            print("FAIL: trained tokenizer does not round-trip held-out text in tokenizers")
            failures += 1
        for name in ("byte_level", "gpt2", "byte_fallback", "metaspace", "llama2"):
            failures += not compare(f"{name}, random text", zaya, fixtures / f"{name}.json",
                                    random_text(rng, 20000), tmp)
    print(f"{'all passed' if not failures else f'{failures} failed'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
