"""RPC's bars (issue 19), measured side by side in one run: not a test, a measurement.

The target on one loopback ggml-rpc-server against fully local, then through a link with added one-way latency
(a delaying TCP proxy: this machine's kernel has no netem), plain decoding against speculation at each latency.
Each configuration is a `localspec generate --json` run; configurations are interleaved, round by round.

Run: .venv/bin/python -m tests.tools.rpc_bars --target T.gguf --draft D.gguf [--delays 0,1,5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from localspec.machine import rpc_build
from tests.test_rpc import free_port, rpc_server

PROMPT = ("Rename the variable total to running_sum in this function and return the code:\n\n"
          "def add_all(values):\n    total = 0\n    for v in values:\n        total += v\n    return total")
DRAFTERS = ("none", "model", "ngram")


@contextmanager
def delaying_proxy(upstream: str, delay_ms: float) -> Iterator[str]:
    """A TCP proxy that holds every chunk `delay_ms` before passing it on, in order, both ways: one-way latency."""
    host, port = upstream.rsplit(":", 1)
    listen = free_port()
    loop = asyncio.new_event_loop()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    writer.close()
                    return
                await asyncio.sleep(max(0.0, due - loop.time()))
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        while data := await reader.read(1 << 16):
            queue.put_nowait((loop.time() + delay_ms / 1000, data))
        queue.put_nowait((loop.time(), b""))
        await sender

    async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)

    async def serve() -> None:
        server = await asyncio.start_server(client, "127.0.0.1", listen)
        async with server:
            await server.serve_forever()

    thread = threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True)
    thread.start()
    time.sleep(0.2)
    yield f"127.0.0.1:{listen}"


def tokens_per_second(target: str, draft: str, drafter: str, rpc: str | None) -> float:
    command = [sys.executable, "-m", "localspec", "generate", "--target", target, "--draft", draft, "--drafter", drafter,
               "--draft-max", "4", "--max-tokens", "64", "--prompt", PROMPT, "--json", *(["--rpc", rpc] if rpc else [])]
    stats = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()[-1])["stats"]
    return 1000 * stats["predicted_n"] / stats["predicted_ms"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--delays", default="0,1,5", help="one-way latencies in ms (0: the server directly)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not rpc_build.server_path().is_file():
        sys.exit("run `localspec rpc-build` first")
    delays = [float(d) for d in args.delays.split(",")]
    results: dict[tuple[str, str], list[float]] = {}
    with rpc_server() as endpoint:
        links = {"local": None}
        proxies = []
        for delay in delays:
            if delay == 0:
                links["rpc"] = endpoint
            else:
                proxy = delaying_proxy(endpoint, delay)
                proxies.append(proxy)
                links[f"rpc +{delay:g} ms"] = proxy.__enter__()
        for round_ in range(args.rounds):
            for link, address in links.items():
                for drafter in DRAFTERS:
                    speed = tokens_per_second(args.target, args.draft, drafter, address)
                    results.setdefault((link, drafter), []).append(speed)
                    print(f"round {round_ + 1} {link:<12} {drafter:<6} {speed:6.2f} tok/s", flush=True)
    print(f"\n{'link':<14}" + "".join(f"{d:>10}" for d in DRAFTERS) + "   best speculation ×plain")
    for link in links:
        medians = {d: statistics.median(results[(link, d)]) for d in DRAFTERS}
        best = max(medians[d] for d in DRAFTERS if d != "none")
        print(f"{link:<14}" + "".join(f"{medians[d]:>10.2f}" for d in DRAFTERS) + f"   {best / medians['none']:.2f}×")


if __name__ == "__main__":
    main()
