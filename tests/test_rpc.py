"""The target on ggml-rpc-servers over loopback: the same greedy output as fully local, and clear errors.

The RPC backend and its server are built once from the llama-cpp-python sources (`localspec rpc-build`'s code) and
cached with the build, as the real pair is. Loads run in `localspec generate` subprocesses: attaching a server adds
devices to the whole process's ggml, which no other test should see.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from localspec.machine import rpc, rpc_build
from tests.conftest import cli
from tests.test_serve_real import RENAME


@pytest.fixture(scope="session")
def rpc_built() -> None:
    """The module and the server, built at most once per llama-cpp-python version on this machine."""
    if not (rpc_build.module_path().is_file() and rpc_build.server_path().is_file() and rpc_build.protocol_version()):
        rpc_build.build(lambda _stage: None)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def rpc_server() -> Iterator[str]:
    """A ggml-rpc-server on loopback; its HOST:PORT once it accepts connections."""
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
        yield f"127.0.0.1:{port}"
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


def test_an_unreachable_or_malformed_address_is_a_clear_error(tiny, rpc_built):
    closed = f"127.0.0.1:{free_port()}"
    result = cli("generate", "--target", str(tiny["target"]), "--prompt", "hi", "--rpc", closed)
    assert result.returncode == 1 and f"Cannot reach the RPC server at {closed}" in result.stderr
    assert "Traceback" not in result.stderr and "ggml-rpc-server -H" in result.stderr
    doctor = cli("doctor", "--rpc", closed)
    assert doctor.returncode == 1 and "Cannot reach" in doctor.stdout
    malformed = cli("generate", "--target", str(tiny["target"]), "--prompt", "hi", "--rpc", "myhost")
    assert malformed.returncode == 2 and "'myhost' is not an RPC server address: give HOST:PORT" in malformed.stderr


def test_a_port_that_is_not_an_rpc_server_is_named_as_such():
    """Something else listens there (a web server, say): it answers, but not in the protocol."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        endpoint = f"127.0.0.1:{listener.getsockname()[1]}"

        def answer_like_a_web_server() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(64)
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

        thread = threading.Thread(target=answer_like_a_web_server)
        thread.start()
        with pytest.raises(rpc.RpcError, match="answered, but not as a ggml-rpc-server"):
            rpc.probe(endpoint)
        thread.join()


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
