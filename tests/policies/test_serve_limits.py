"""`aitp serve` bounded against hostile clients, over real sockets to a real server process.

Huge bodies (declared or chunked) get 413 without being held, slow and idle clients are answered
and dropped at the request deadline, short bodies get 400, and no wrong type in a request is a 500.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.rollouts.helpers import make_tiny_checkpoint, start_server, stop

REQUEST_TIMEOUT_S = 2.0
BODY_CAP = 1 << 20  # the server's default
PEAK_RSS_LIMIT_KB = 500 * 1024
CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve-limits")
    checkpoint = make_tiny_checkpoint(root / "tiny")
    proc, url = start_server(str(checkpoint), root / "serve.log", args=("--request-timeout", str(REQUEST_TIMEOUT_S)))
    try:
        yield proc, url
    finally:
        stop(proc)


def _connect(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=30)


def _head(length: int | None = None, chunked: bool = False) -> bytes:
    lines = [f"POST {CHAT} HTTP/1.1", "Host: test", "Content-Type: application/json"]
    lines += [f"Content-Length: {length}"] if length is not None else []
    lines += ["Transfer-Encoding: chunked"] if chunked else []
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _answer(sock: socket.socket) -> tuple[int, dict]:
    """The status and JSON body of the one response on `sock`, read until it is whole or the socket closes."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"closed without an answer after {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, json.loads(body[:length])


def _vm_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def test_a_declared_100_mb_body_is_refused_before_it_is_read(server):
    _, url = server
    with _connect(url) as sock:
        sock.sendall(_head(100 * 2**20))  # headers only: the answer must not wait for the body
        status, body = _answer(sock)
    assert status == 413 and "--max-body-bytes" in body["error"]["message"]


def test_a_chunked_body_is_refused_once_it_passes_the_cap(server):
    _, url = server
    chunk = b"x" * 65536
    with _connect(url) as sock:
        sock.sendall(_head(chunked=True))
        for _ in range(2 * BODY_CAP // len(chunk)):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        sock.sendall(b"0\r\n\r\n")
        status, _ = _answer(sock)
    assert status == 413


def test_three_100_mb_bodies_at_once_stay_under_500_mb(server):
    """Sent for real, whole, at once: one declared, one chunked, one declared again; each answered 413."""
    proc, url = server
    payload = b"x" * (100 * 2**20)
    statuses = []

    def send(chunked: bool) -> None:
        with _connect(url) as sock:
            if chunked:
                sock.sendall(_head(chunked=True))
                view = memoryview(payload)
                for at in range(0, len(payload), 2**20):
                    sock.sendall(b"%x\r\n" % len(view[at : at + 2**20]) + view[at : at + 2**20] + b"\r\n")
                sock.sendall(b"0\r\n\r\n")
            else:
                sock.sendall(_head(len(payload)) + payload)
            statuses.append(_answer(sock)[0])

    threads = [threading.Thread(target=send, args=(c,)) for c in (False, True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(statuses) == [413, 413, 413]
    peak = _vm_kb(proc.pid, "VmHWM")
    assert peak < PEAK_RSS_LIMIT_KB, f"server peak RSS {peak / 1024:.0f} MB"


def _dropped_after(sock: socket.socket, trickle: bytes) -> tuple[float, bytes]:
    """Send `trickle` a byte every 0.25 s until the server answers or closes; (seconds taken, what it said)."""
    started = time.monotonic()
    for byte in trickle:
        if select.select([sock], [], [], 0.25)[0]:
            break
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            break
    said = b""
    while chunk := sock.recv(65536):
        said += chunk
    return time.monotonic() - started, said


def test_a_client_sending_headers_a_byte_at_a_time_is_dropped(server):
    _, url = server
    with _connect(url) as sock:
        took, said = _dropped_after(sock, _head(10) * 10)
    assert took < REQUEST_TIMEOUT_S + 2, f"held {took:.1f} s"
    assert said.startswith(b"HTTP/1.1 408")


def test_a_slow_body_is_dropped_and_an_idle_connection_closed(server):
    _, url = server
    with _connect(url) as sock:
        sock.sendall(_head(1000))
        took, said = _dropped_after(sock, b"x" * 1000)
    assert took < REQUEST_TIMEOUT_S + 2 and said.startswith(b"HTTP/1.1 400"), (took, said)
    with _connect(url) as sock:
        started = time.monotonic()
        assert sock.recv(100) == b""  # never sent a byte: closed without an answer
    assert time.monotonic() - started < REQUEST_TIMEOUT_S + 2


def test_a_body_shorter_than_its_content_length_gets_400(server):
    _, url = server
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
    with _connect(url) as sock:  # the client waits for an answer it can never get in full
        sock.sendall(_head(len(body) + 10) + body)
        status, answer = _answer(sock)
    assert status == 400 and f"Content-Length of {len(body) + 10}" in answer["error"]["message"]
    with _connect(url) as sock:  # the client says it is done sending
        sock.sendall(_head(len(body) + 10) + body)
        sock.shutdown(socket.SHUT_WR)
        started = time.monotonic()
        status, answer = _answer(sock)
    assert status == 400 and "closed its side" in answer["error"]["message"]
    assert time.monotonic() - started < 1.0


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


WRONG_CHATS = [
    {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
    {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
    {"messages": [{"role": "user", "content": [5]}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    {"messages": [{"role": "user", "content": 5}]},
    {"messages": [{"role": "user", "content": {"text": "x"}}]},
    {"messages": [{"role": "user"}]},
    {"messages": [{"role": 5, "content": "x"}]},
    {"messages": [{"role": ["user"], "content": "x"}]},
    {"messages": "hi"},
    {"messages": [5]},
    {"messages": [["user", "hi"]]},
    {"messages": []},
    {},
    {"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"},
    {"messages": [{"role": "user", "content": "x"}], "n": 1.5},
    {"messages": [{"role": "user", "content": "x"}], "stop": [5]},
    {"messages": [{"role": "user", "content": "x"}], "seed": "x"},
    {"messages": [{"role": "user", "content": "x"}], "temperature": "hot"},
    {"messages": [{"role": "user", "content": "x"}], "top_logprobs": [1]},
    {"messages": [{"role": "user", "content": "x"}], "model": 5},
    [],
    "x",
    5,
    None,
]
WRONG_COMPLETIONS = [{"prompt": 5}, {"prompt": [5]}, {"prompt": [["a"]]}, {"prompt": None}, {"prompt": "a", "echo": 3}]
NOT_JSON = [b"{", b"\xff\xfe", _deep(100_000).encode(), b'{"messages": ' + _deep(5000).encode() + b"}"]


def test_every_wrong_type_is_a_400_never_a_500(server):
    _, url = server
    with httpx.Client(base_url=url.removesuffix("/v1"), timeout=30) as client:
        answers = [(body, client.post(CHAT, json=body)) for body in WRONG_CHATS]
        answers += [(body, client.post("/v1/completions", json=body)) for body in WRONG_COMPLETIONS]
        answers += [(body[:40], client.post(CHAT, content=body)) for body in NOT_JSON]
        wrong = [(body, r.status_code, r.text[:200]) for body, r in answers if r.status_code != 400]
        assert wrong == []
        assert all(r.json()["error"]["message"] for _, r in answers)
        ok = client.post(CHAT, json={"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
        assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["role"] == "assistant"
