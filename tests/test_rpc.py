"""The target on ggml-rpc-servers over loopback: the same greedy output as fully local, and clear errors.

The RPC backend and its server are built once from the llama-cpp-python sources (`localspec rpc-build`'s code) and
cached with the build, as the real pair is. Loads run in `localspec generate` subprocesses: attaching a server adds
devices to the whole process's ggml, which no other test should see.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from localspec.machine import rpc, rpc_build
from tests.conftest import cli
from tests.live_server import live_server
from tests.test_serve_real import RENAME


@pytest.fixture(scope="session")
def rpc_built() -> None:
    """The module and the server, built at most once per llama-cpp-python version on this machine."""
    if not rpc_build.is_built():
        rpc_build.build(lambda _stage: None)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def rpc_server() -> Iterator[str]:
    """A ggml-rpc-server on loopback; its HOST:PORT once it accepts connections."""
    with rpc_server_process() as (endpoint, _process):
        yield endpoint


@contextmanager
def rpc_server_process() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The same, with the process, for a test that kills it."""
    port = free_port()
    process = subprocess.Popen([str(rpc_build.server_path()), "-H", "127.0.0.1", "-p", str(port), "-t", "2"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                    break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError("ggml-rpc-server exited at start") from None
                subprocess.run(["sleep", "0.1"])
        yield f"127.0.0.1:{port}", process
    finally:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def servers(rpc_built) -> Iterator[tuple[str, str]]:
    with rpc_server() as first, rpc_server() as second:
        yield first, second


def generate(*args: str) -> dict:
    result = cli("generate", "--json", "--temperature", "0", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_server_reports_its_protocol_and_memory(servers):
    server = rpc.probe(servers[0])
    assert server.version == rpc_build.protocol_version()
    assert len(server.devices) == 1 and 0 < server.devices[0].free_bytes <= server.devices[0].total_bytes
    doctor = cli("doctor", "--rpc", servers[0])
    assert doctor.returncode == 0, doctor.stderr
    assert f"{servers[0]}" in doctor.stdout and f"protocol {'.'.join(map(str, server.version))}" in doctor.stdout


@pytest.mark.parametrize("drafter", ["none", "model"])
def test_tiny_target_on_one_and_two_servers_writes_what_it_writes_here(tiny, servers, drafter):
    common = ["--target", str(tiny["target"]), "--draft", str(tiny["same"]), "--drafter", drafter, "--draft-max", "4",
              "--prompt", "tell me a story", "--max-tokens", "40"]
    local = generate(*common)
    for endpoints in (servers[0], ",".join(servers)):
        remote = generate(*common, "--rpc", endpoints)
        assert remote["tokens"] == local["tokens"], endpoints
        target, draft = remote["device"]["offloaded"]
        assert target["on_gpu"] > 0 and draft["on_gpu"] == 0  # the target's layers went to the servers; the draft stayed
        assert remote["device"]["backend"] == "RPC" and [g["description"] for g in remote["device"]["gpus"]] == endpoints.split(",")
    if drafter == "model":
        assert remote["stats"]["draft_n_accepted"] > 0


def test_real_target_on_two_servers_writes_what_it_writes_here(real_models, servers):
    target, draft = real_models
    common = ["--target", str(target), "--draft", str(draft), "--drafter", "model", "--draft-max", "4", "--prompt", RENAME,
              "--max-tokens", "16"]  # 16 tokens of RENAME are clear of near-ties (test_serve_real checks it)
    local = generate(*common)
    remote = generate(*common, "--rpc", ",".join(servers))
    assert remote["tokens"] == local["tokens"] and remote["stats"]["draft_n_accepted"] > 0
    plain = generate(*common[:4], "--drafter", "none", *common[8:], "--rpc", servers[0])
    assert plain["tokens"] == local["tokens"]


ASYNC_PASSES = (  # the scheduler at one slot over RPC, every target pass timed from outside as well
    "import json, sys, time\n"
    "from localspec.machine import rpc\n"
    "from localspec.engine.batch.scheduler import BatchScheduler\n"
    "from localspec.engine.chat import Message, chat_prompt_tokens\n"
    "from localspec.engine.drafters.auto.controller import AutoDrafter\n"
    "from localspec.engine.pass_costs import calibrate\n"
    "from localspec.engine.generation_config import GenerationConfig\n"
    "from localspec.engine.llama.model import Model, ModelConfig\n"
    "from tests.batch_runs import run_batch\n"
    "rpc.attach([sys.argv[2]])\n"
    "passes = []\n"
    "with Model(sys.argv[1], ModelConfig(n_gpu_layers=-1, n_ctx=1024)) as model:\n"
    "    decode = model._decode_entries\n"
    "    def timed(entries, wants):\n"
    "        ns, start = model.decode_ns, time.perf_counter_ns()\n"
    "        rows = decode(entries, wants)\n"
    "        if rows is not None: rows.max()  # reads the output, as every caller does\n"
    "        passes.append((len(entries), time.perf_counter_ns() - start, model.decode_ns - ns))\n"
    "        return rows\n"
    "    model._decode_entries = timed\n"
    "    auto = AutoDrafter(calibrate(model, None))  # times its costs for real\n"
    "    prompt = chat_prompt_tokens(model, [Message('user', 'Write a haiku about rain.')])\n"
    "    [done] = run_batch(BatchScheduler.alone(model), [(prompt, GenerationConfig(max_tokens=12), auto)])\n"
    "    print(json.dumps({'passes': passes, 'learned': auto.planner.costs.verify(1), 'overhead_ms': auto.planner.overhead_ms,\n"
    "                      'stats': done.run.finished.stats.to_dict()}))\n"
)


def test_an_asynchronous_backends_passes_are_timed_to_their_end(real_models, servers):
    """RPC, like CUDA and Metal, returns from llama_decode before the pass is done; the wait lands in the first read of
    its output. Timed around llama_decode alone, t_llama_ms read 1% of an answer's time, python_ms_per_step was the
    passes' time, and the batch planner took the wait for Python overhead paid on every step. Each pass is now timed
    to its end: its llama time is its wall time, the planner's costs are the passes' and its overhead is not a pass."""
    target, _ = real_models
    child = subprocess.run([sys.executable, "-c", ASYNC_PASSES, str(target), servers[0]], capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-2000:]
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    # Shares, not durations, each bound far from both sides: timed to llama_decode's return, llama's share of a pass read
    # 1% here; timed to its end it is all but the microseconds of Python around the call, whatever the machine's load.
    walls, llamas = (sum(recorded[i] for recorded in seen["passes"]) for i in (1, 2))
    assert llamas >= 0.5 * walls, (llamas, walls)
    one_token = sorted(wall_ns / 1e6 for n, wall_ns, _ in seen["passes"] if n == 1)
    assert one_token[0] <= seen["learned"] <= one_token[-1], (seen["learned"], one_token)  # learned from those passes
    assert seen["overhead_ms"] < 0.5 * one_token[len(one_token) // 2], (seen["overhead_ms"], one_token)  # was the whole pass
    stats = seen["stats"]
    assert 0.5 * stats["predicted_ms"] <= stats["t_llama_ms"] <= stats["predicted_ms"], stats


def test_an_unreachable_or_malformed_address_is_a_clear_error(tiny, rpc_built):
    closed = f"127.0.0.1:{free_port()}"
    result = cli("generate", "--target", str(tiny["target"]), "--prompt", "hi", "--rpc", closed)
    assert result.returncode == 1 and f"Cannot reach the RPC server at {closed}" in result.stderr
    assert "Traceback" not in result.stderr and "ggml-rpc-server -H" in result.stderr
    doctor = cli("doctor", "--rpc", closed)
    assert doctor.returncode == 1 and "Cannot reach" in doctor.stdout
    malformed = cli("generate", "--target", str(tiny["target"]), "--prompt", "hi", "--rpc", "myhost")
    assert malformed.returncode == 2 and "'myhost' is not an RPC server address: give HOST:PORT" in malformed.stderr


@contextmanager
def one_answer_peer(request_size: int, answer: bytes) -> Iterator[str]:
    """Something listening on loopback that reads one request of `request_size` bytes, sends `answer`, and closes."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()

        def answer_once() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(request_size)
                connection.sendall(answer)

        thread = threading.Thread(target=answer_once)
        thread.start()
        yield f"127.0.0.1:{listener.getsockname()[1]}"
        thread.join()


def test_a_port_that_is_not_an_rpc_server_is_named_as_such():
    """Something else listens there (a web server, say): it answers, but not in the protocol."""
    with one_answer_peer(64, b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n") as endpoint:
        with pytest.raises(rpc.RpcError, match="answered, but not as a ggml-rpc-server"):
            rpc.probe(endpoint)


def test_rpc_build_refuses_a_file_that_is_not_the_sources(tmp_path):
    fake = tmp_path / "llama_cpp_python.tar.gz"
    fake.write_text("not an archive")
    result = cli("rpc-build", "--sdist", str(fake))
    assert result.returncode == 1 and "cannot be unpacked" in result.stderr and "Traceback" not in result.stderr


def test_only_loopback_and_private_addresses_count_as_trusted():
    assert rpc.is_trusted_network("127.0.0.1:50052") and rpc.is_trusted_network("192.168.1.20:50052")
    assert rpc.is_trusted_network("localhost:50052")
    assert not rpc.is_trusted_network("8.8.8.8:50052")
    assert rpc.parse_endpoints(" 10.0.0.2:50052,localhost:7 ") == ["10.0.0.2:50052", "localhost:7"]


# A long answer from the tiny target at T=0 (875 tokens before its end of text), so that a server killed after its
# first words is killed mid-answer.
LONG = ["--drafter", "none", "--prompt", "tell me a story", "--max-tokens", "2000", "--ctx-size", "4096"]


def test_a_server_lost_mid_answer_ends_it_with_a_clear_error_and_keeps_the_text(tiny, rpc_built):
    local = generate("--target", str(tiny["target"]), *LONG)
    assert len(local["tokens"]) > 500
    with rpc_server_process() as (endpoint, server):
        command = [sys.executable, "-m", "localspec", "generate", "--temperature", "0", "--target", str(tiny["target"]),
                   *LONG, "--rpc", endpoint]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        written = process.stdout.read(40)  # the answer has begun
        server.kill()
        written += process.stdout.read()
        errors = process.stderr.read()
        assert process.wait(timeout=60) == 1, errors
    assert f"The RPC server at {endpoint} stopped answering" in errors and "load the pair again" in errors
    assert "Traceback" not in errors and "GGML_ABORT" not in errors
    partial = written.removesuffix("\n")
    assert len(written) >= 40 and local["text"].startswith(partial) and len(partial) < len(local["text"])


def test_a_server_lost_mid_stream_ends_that_answer_and_the_server_goes_on(tiny, rpc_built, tmp_path):
    """Through `localspec serve`: the stream's last event is the error, /health still answers, later requests are refused
    with the same message (the pair is on a lost server), and the process lives."""
    with rpc_server_process() as (endpoint, rpc_process), live_server(tmp_path, "--target", str(tiny["target"]),
                                                                      "--drafter", "none", "--rpc", endpoint) as server:
        body = {"messages": [{"role": "user", "content": "tell me a story"}], "max_tokens": 2000, "temperature": 0, "stream": True}
        request = urllib.request.Request(server.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        events = []
        with urllib.request.urlopen(request, timeout=120) as stream:
            for line in stream:
                if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                    events.append(json.loads(line[6:]))
                    if len(events) == 3:
                        rpc_process.kill()
        texts = [event["choices"][0]["delta"].get("content") or "" for event in events if event.get("choices")]
        assert "".join(texts) and "stopped answering" in events[-1]["error"]["message"]
        assert server.request("GET", "/health")[0] == 200
        status, refused = server.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
        assert status == 500 and f"The RPC server at {endpoint} stopped answering" in refused["error"]["message"]
        assert server.process.poll() is None


def test_a_server_of_another_protocol_version_is_named_with_both_versions(rpc_built):
    """A server from another llama.cpp answers HELLO with its own version; the probe says which, before ggml sees it."""
    expected = rpc_build.protocol_version()
    reply = struct.pack("<BBB", expected[0] + 1, 0, 0) + bytes(1 + 24)  # version, a pad byte, the capability bytes
    with one_answer_peer(1 + 8 + 24, struct.pack("<Q", len(reply)) + reply) as endpoint:
        with pytest.raises(rpc.RpcError, match=rf"speaks protocol {expected[0] + 1}\.0\.0; this llama.cpp speaks {expected[0]}\.{expected[1]}"):
            rpc.probe(endpoint)


def test_the_app_keeps_a_lost_answer_and_goes_on_without_the_server(tiny, rpc_built, tmp_path):
    """The app's settings name the server; it is killed mid-answer: the answer ends as an error with its text kept
    (on screen and in the history), the message names the server, and once the settings drop it the pair reloads
    here and the next answer is whole."""
    with rpc_server_process() as (endpoint, server):
        command = [sys.executable, "-m", "tests.app_rpc_fault", str(tmp_path), str(tiny["talkative"]),
                   str(tiny["talkative_draft"]), endpoint, str(server.pid)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["target_on_gpu"] > 0 and seen["reloaded_target_on_gpu"] == 0
    assert seen["status"] == "error" and len(seen["shown"]) > 20
    assert any(f"The RPC server at {endpoint} stopped answering" in note for note in seen["notes"])
    assert seen["stored"][0] == ["error", seen["shown"]]
    done = seen["after_status"]  # the answer after the loss: ended by the model or by its max tokens, and stored so
    assert done in ("complete", "max_tokens") and seen["after_text"] and seen["stored"][1] == [done, seen["after_text"]]


def test_the_draft_goes_to_the_servers_only_when_asked(tiny, servers):
    common = ["--target", str(tiny["target"]), "--draft", str(tiny["same"]), "--drafter", "model", "--prompt", "hi",
              "--max-tokens", "8", "--rpc", servers[0]]
    kept_here = generate(*common)["device"]["offloaded"]
    sent = generate(*common, "--draft-rpc")["device"]["offloaded"]
    assert kept_here[1]["on_gpu"] == 0 and sent[1]["on_gpu"] == sent[1]["total"] > 0
    alone = cli("generate", "--target", str(tiny["target"]), "--prompt", "hi", "--draft-rpc")
    assert alone.returncode == 2 and "--draft-rpc puts the draft on the --rpc servers: give --rpc" in alone.stderr
