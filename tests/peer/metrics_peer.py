"""Peer test: `zaya serve`'s /metrics read by Prometheus' own parser (prometheus_client) after hostile
requests: random paths, a path that tries to write its own line into the text (quote, brace, newline
percent-encoded, as a client library would send them), and unauthenticated requests. The text must parse,
and `zaya_requests_total` may hold only the fixed endpoint labels.

Usage: metrics_peer.py ZAYA_BINARY
"""

import ctypes
import pathlib
import random
import re
import signal
import string
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
ENDPOINTS = {"/v1/completions", "/v1/models", "/health", "/metrics", "/tokenize", "/detokenize", "/tokenizer_info",
             "other"}
KEY = "metrics-peer-key"


def die_with_parent():
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def get(url, key=None):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def main():
    zaya = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        subprocess.run([zaya, "tokenizer", "train", "--input", FIXTURES / "eval/text.txt", "--vocab-size", "300",
                        "--output", tmp / "tokenizer.json"], check=True, capture_output=True)
        subprocess.run([zaya, "init", "--preset", "tiny", "--out", tmp / "model", "--seed", "5"], check=True,
                       capture_output=True)
        (tmp / "model/tokenizer.json").write_bytes((tmp / "tokenizer.json").read_bytes())
        server = subprocess.Popen([zaya, "serve", "--model", tmp / "model", "--port", "0", "--api-key", KEY],
                                  stderr=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
        try:
            port = None
            for line in server.stderr:
                if m := re.search(r"listening on http://127.0.0.1:(\d+)", line):
                    port = int(m.group(1))
                    break
            assert port, "the server did not start"
            url = f"http://127.0.0.1:{port}"
            rng = random.Random(3)
            for _ in range(200):
                path = "/" + "".join(rng.choice(string.ascii_letters + "/") for _ in range(30))
                get(url + path, KEY)
                get(url + path)  # 401: the key is checked before the path
            injected = '/a"} 0\nzaya_injected{endpoint="a"} 1\n'
            get(url + urllib.request.quote(injected, safe="/"), KEY)
            get(url + "/v1/models", KEY)
            status, text = get(url + "/metrics", KEY)
            assert status == 200, f"/metrics: HTTP {status}"
            families = {f.name: f for f in text_string_to_metric_families(text)}
            assert "zaya_injected" not in families, "a path wrote its own metric"
            labels = {s.labels["endpoint"] for s in families["zaya_requests"].samples}
            extra = sorted(labels - ENDPOINTS)
            assert not extra, f"{len(extra)} endpoint labels outside the fixed set, e.g. {extra[:3]}"
            other = sum(s.value for s in families["zaya_requests"].samples if s.labels["endpoint"] == "other")
            assert other >= 401, f"the 401 hostile requests are not all counted as 'other' ({other})"
            print(f"ok: /metrics parses ({len(families)} families); endpoint labels {sorted(labels)}; "
                  f"{other:.0f} requests counted as 'other'")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
