"""Peak memory of `aitp` under hostile input (issue 37, item 5): each must stay under 500 MB.

    .venv/bin/python benchmarks/hostile_inputs.py [--rows 20000000] [--out FILE]

Each case runs the real command as a child process; its peak RSS is the child's own (`os.wait4`'s
rusage, or the server's VmHWM from /proc while it still runs):
  yaml   `aitp run --config` on a billion-laughs file (10^9 values once expanded), and on a file at
         the 256 KiB cap made of one-character values (the most nodes libyaml composes in that size);
  serve  `aitp serve --policy tiny`: three 100 MB bodies sent at once with Content-Length, three
         chunked, then three bodies just under the cap built to cost the most to parse (`[{},{},...]`);
  sql    `aitp sql` of --rows rows (an int, a float, a short string) in table, csv and json, stdout
         to /dev/null, --timeout 0.
Prints a markdown table (and writes it to --out).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
LIMIT_MB = 500


def _env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


# Between this process and the command: a child exec'd straight from here would carry this
# process's high-water mark (the 100 MB payloads) in its rusage, as Linux keeps the larger.
LAUNCHER = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
open(sys.argv[1], "w").write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def measured(args: list[str], tmp: Path) -> tuple[int, float, float, str]:
    """(exit code, seconds, peak RSS in MB, last stderr line) of `python -m aitp ARGS`, stdout dropped."""
    peak_file = tmp / "peak-rss-kb"
    started = time.monotonic()
    done = subprocess.run(
        [PYTHON, "-c", LAUNCHER, str(peak_file), PYTHON, "-m", "aitp", *args],
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    err = done.stderr.strip().splitlines()
    return done.returncode, time.monotonic() - started, int(peak_file.read_text()) / 1024, (err[-1] if err else "")


def yaml_cases(tmp: Path) -> list[tuple[str, int, float, float, str]]:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    bomb = tmp / "bomb.yaml"
    bomb.write_text("experiment: bomb\n" + "\n".join(lines) + "\n")
    flat = tmp / "flat.yaml"
    flat.write_text("x: [" + ",".join(["0"] * ((256 << 10) // 2 - 4)) + "]\n")
    rows = []
    for name, path in (("YAML billion laughs (10^9 values)", bomb), ("YAML at the 256 KiB cap, 1-char values", flat)):
        code, took, peak, err = measured(["run", "--config", str(path), "--home", str(tmp / "home")], tmp)
        rows.append((name, code, took, peak, err))
    return rows


def _send(url: str, head: bytes, body_parts, statuses: list[int]) -> None:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=120) as sock:
        sock.sendall(head)
        for part in body_parts:
            sock.sendall(part)
        answer = b""
        while b"\r\n" not in answer and (chunk := sock.recv(4096)):
            answer += chunk
        statuses.append(int(answer.split()[1]) if answer else 0)


def _vm_hwm_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+)", text).group(1)) / 1024


def serve_cases(tmp: Path) -> list[tuple[str, int, float, float, str]]:
    log = tmp / "serve.log"
    with log.open("wb") as stream:
        proc = subprocess.Popen(
            [PYTHON, "-m", "aitp", "serve", "--policy", "tiny", "--port", "0", "--device", "cpu"],
            env=_env(),
            stdout=subprocess.DEVNULL,
            stderr=stream,
        )
    try:
        deadline = time.monotonic() + 120
        while not (found := re.search(r"at (http://\S+)/v1", log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"aitp serve did not start: {log.read_text()}")
            time.sleep(0.2)
        url = found.group(1)
        rows = [("serve at rest (tiny policy loaded)", 0, 0.0, _vm_hwm_mb(proc.pid), "")]
        payload = b"x" * (100 * 2**20)
        step = 2**20
        chunked = [b"%x\r\n" % step + payload[at : at + step] + b"\r\n" for at in range(0, len(payload), step)]
        parse_bomb = b'{"messages":[' + b",".join([b"{}"] * ((1 << 20) // 3 - 10)) + b"]}"
        cases = {
            "serve: three 100 MB bodies at once (Content-Length)": lambda: (
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: b\r\nContent-Length: %d\r\n\r\n" % len(payload),
                [payload],
            ),
            "serve: three 100 MB chunked bodies at once": lambda: (
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n",
                chunked + [b"0\r\n\r\n"],
            ),
            "serve: three 1 MiB `[{},{},...]` bodies at once": lambda: (
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: b\r\nContent-Length: %d\r\n\r\n" % len(parse_bomb),
                [parse_bomb],
            ),
        }
        for name, build in cases.items():
            head, parts = build()
            statuses: list[int] = []
            started = time.monotonic()
            threads = [threading.Thread(target=_send, args=(url, head, parts, statuses)) for _ in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            answer = "answered " + ", ".join(str(s) for s in sorted(statuses))
            rows.append((name, 0, time.monotonic() - started, _vm_hwm_mb(proc.pid), answer))
        return rows
    finally:
        proc.terminate()
        proc.wait(30)


def sql_cases(tmp: Path, rows: int) -> list[tuple[str, int, float, float, str]]:
    home = tmp / "sqlhome"
    home.mkdir()
    query = f"SELECT range AS id, range * 0.5 AS half, 'item-' || range AS name FROM range({rows})"
    out = []
    for fmt in ("table", "csv", "json"):
        code, took, peak, err = measured(["sql", query, "--format", fmt, "--timeout", "0", "--home", str(home)], tmp)
        out.append((f"sql: {rows:,} rows as {fmt}", code, took, peak, err))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = yaml_cases(Path(tmp)) + serve_cases(Path(tmp)) + sql_cases(Path(tmp), args.rows)
    lines = ["| input | exit | seconds | peak RSS (MB) | under 500 MB | says |", "|---|---:|---:|---:|---|---|"]
    for name, code, took, peak, said in results:
        said = said.replace("|", "\\|")[:110]
        lines.append(f"| {name} | {code} | {took:.1f} | {peak:.0f} | {'yes' if peak < LIMIT_MB else 'NO'} | {said} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
