"""Raw-socket HTTP clients for serve_hostile_test.sh: what curl cannot do (pipelining, leaving mid-request,
thousands of requests on one connection, connection caps). Standard library only.

Usage: hostile_client.py COMMAND PORT [ARGS]; prints what it found, exits 1 when the server misbehaved.
"""

import json
import os
import random
import socket
import sys
import time


# The server's API key (ZAYA_TEST_KEY) as a header line, for the requests that are not meant to be refused.
AUTH = f"Authorization: Bearer {os.environ['ZAYA_TEST_KEY']}\r\n" if os.environ.get("ZAYA_TEST_KEY") else ""


def connect(port, source="127.0.0.1", timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))
    return s


def read_response(s, buffer=b""):
    """One response (Content-Length framed) from s; returns (status, body, rest of the buffer)."""
    while b"\r\n\r\n" not in buffer:
        data = s.recv(65536)
        if not data:
            raise EOFError("connection closed before a response head")
        buffer += data
    head, buffer = buffer.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    while len(buffer) < length:
        data = s.recv(65536)
        if not data:
            raise EOFError("connection closed inside a response body")
        buffer += data
    return status, buffer[:length], buffer[length:]


def pipeline(port):
    """Three requests in one write: three answers, in order."""
    s = connect(port)
    paths = ["/health", "/v1/models", "/tokenizer_info"]
    s.sendall(b"".join(f"GET {p} HTTP/1.1\r\nHost: x\r\n{AUTH}\r\n".encode() for p in paths))
    rest = b""
    bodies = []
    for _ in paths:
        status, body, rest = read_response(s, rest)
        bodies.append((status, body))
    keys = ["status", "data", "model_max_length"]
    ok = all(st == 200 and k in json.loads(b) for (st, b), k in zip(bodies, keys))
    print("pipelined answers:", [(st, b[:40]) for st, b in bodies])
    return ok


def metric(port, name):
    s = connect(port)
    s.sendall(f"GET /metrics HTTP/1.1\r\nHost: x\r\n{AUTH}Connection: close\r\n\r\n".encode())
    _, body, _ = read_response(s)
    s.close()
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def leave(port, stream):
    """Non-streamed (or streamed) completions whose clients leave mid-way: every sequence is cancelled."""
    # Greedy: a sampled sequence of this untrained model draws the end-of-text token within a few hundred.
    # 64 sequences of 1000 tokens: several seconds of the tiny model's decoding on two cores.
    body = json.dumps({"prompt": "The cat", "max_tokens": 1000, "n": 16, "temperature": 0,
                       "stream": stream == "stream"}).encode()
    request = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\n{AUTH}Content-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    clients = []
    for _ in range(4):
        s = connect(port)
        s.sendall(request)
        clients.append(s)
    time.sleep(1.0)
    busy = (metric(port, "zaya_running_sequences") or 0) + (metric(port, "zaya_queued_sequences") or 0)
    print(f"sequences running or queued with 4 clients waiting: {busy:.0f}")
    for s in clients:
        s.close()
    left = time.monotonic()
    while time.monotonic() - left < 1.5:
        running, queued = metric(port, "zaya_running_sequences"), metric(port, "zaya_queued_sequences")
        if running == 0 and queued == 0:
            print(f"all cancelled {time.monotonic() - left:.2f} s after the clients left")
            return busy > 0
        time.sleep(0.05)
    print(f"1.5 s after the clients left: {running:.0f} running, {queued:.0f} queued")
    return False


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def flood(port, count, pid=None):
    """count requests to random paths (a few with a label injection) on keep-alive connections, without the
    API key (401s: the key is checked before the path) and with it (404s); with pid, prints the server's
    resident memory before and after (after a warm-up of 2,000)."""
    rng = random.Random(1)

    def send(n):
        s = connect(port)
        rest = b""
        for i in range(n):
            if i % 1000 == 0:
                path = "/x%22%7D%200%0Azaya_injected%7Bendpoint%3D%22a%22%7D%201%0A"
            else:
                # Long paths: a server that kept each would grow by kilobytes a request.
                path = "/" + format(rng.getrandbits(8000), "02000x")
            request = f"GET {path} HTTP/1.1\r\nHost: x\r\n{AUTH if i % 4 == 0 else ''}\r\n".encode()
            try:
                s.sendall(request)
                status, _, rest = read_response(s, rest)
            except (EOFError, ConnectionResetError, BrokenPipeError):  # a server that ends keep-alive early
                s.close()
                s, rest = connect(port), b""
                s.sendall(request)
                status, _, rest = read_response(s, rest)
            if status not in (401, 404):
                raise RuntimeError(f"{path}: HTTP {status}")
        s.close()

    send(2000)
    before = rss_kb(pid) if pid else 0
    start = time.monotonic()
    send(count)
    if pid:
        after = rss_kb(pid)
        print(f"{count} requests in {time.monotonic() - start:.1f} s; VmRSS {before} kB -> {after} kB "
              f"({(after - before) / 1024:+.2f} MB)")
        return after - before < 2 * 1024
    return True


def caps(port, per_client, total):
    """per_client connections from 127.0.0.1 are kept, the next is refused; so is the one past total."""
    kept = [connect(port) for _ in range(per_client)]
    time.sleep(0.2)

    def refused(source):
        s = connect(port, source)
        try:
            status, body, _ = read_response(s)
            return status == 503
        except (EOFError, ConnectionResetError):
            return True  # closed at once
        finally:
            s.close()

    over_client = refused("127.0.0.1")
    others = [connect(port, "127.0.0.2") for _ in range(total - per_client)]
    time.sleep(0.2)
    over_total = refused("127.0.0.3")
    # A kept connection still works.
    kept[0].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    status, _, _ = read_response(kept[0])
    print(f"past {per_client} from one address refused: {over_client}; past {total} in all: {over_total}; "
          f"a kept connection answers: {status}")
    for s in kept + others:
        s.close()
    return over_client and over_total and status == 200


def slow_head(port, wait):
    """A head that never ends: 408 (or the connection closed) within `wait` seconds."""
    s = connect(port, timeout=wait)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
    start = time.monotonic()
    try:
        status, _, _ = read_response(s)
    except socket.timeout:
        print(f"no answer in {wait} s")
        return False
    print(f"unfinished head: HTTP {status} after {time.monotonic() - start:.1f} s")
    return status == 408


def slow_body(port, wait):
    """A body sent a byte a second: 408 within `wait` seconds however long the bytes keep coming."""
    s = connect(port, timeout=wait)
    s.sendall(f"POST /tokenize HTTP/1.1\r\nHost: x\r\n{AUTH}Content-Length: 1000\r\n\r\n".encode())
    start = time.monotonic()
    s.setblocking(False)
    buffer = b""
    while time.monotonic() - start < wait:
        try:
            s.send(b"a")
        except (BrokenPipeError, ConnectionResetError):
            break
        try:
            data = s.recv(65536)
            if not data:
                break
            buffer += data
            if b"\r\n\r\n" in buffer:
                break
        except BlockingIOError:
            pass
        time.sleep(0.5)
    print(f"trickled body: {buffer[:20]!r} after {time.monotonic() - start:.1f} s")
    return buffer.startswith(b"HTTP/1.1 408")


def main():
    command, port = sys.argv[1], int(sys.argv[2])
    args = sys.argv[3:]
    if command == "pipeline":
        ok = pipeline(port)
    elif command == "leave":
        ok = leave(port, args[0])
    elif command == "flood":
        ok = flood(port, int(args[0]), int(args[1]) if len(args) > 1 else None)
    elif command == "caps":
        ok = caps(port, int(args[0]), int(args[1]))
    elif command == "slow_head":
        ok = slow_head(port, float(args[0]))
    elif command == "slow_body":
        ok = slow_body(port, float(args[0]))
    else:
        raise SystemExit(f"unknown command {command}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
