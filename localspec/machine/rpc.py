"""Remote devices through llama.cpp's RPC backend: check a `ggml-rpc-server`, then add it to ggml's device list.

Why a probe of our own before ggml sees an address: ggml's RPC client has no error to return for a server that cannot
be reached or speaks another protocol version (its own build aborts the process; the one localspec builds marks the
connection lost, and a load onto it would then fail with no word of why). So each server is first asked, over a
plain socket and in the server's own protocol, for its version, its devices and their free memory; only a server
that answers is handed to ggml, and one that does not is named in a clear error. The same answers are what `localspec doctor --rpc` prints.

Once added, a server's devices are ordinary ggml devices (type GPU): the memory planner counts their free memory
like a local GPU's, and llama.cpp spreads the offloaded layers over them. A server lost later, mid-answer, is seen by
the check this module hands the engine (device_faults): the backend localspec builds counts its lost connections.
"""

from __future__ import annotations

import ctypes
import ipaddress
import socket
import struct
from dataclasses import dataclass

from localspec.engine.llama import device_faults
from localspec.engine.llama.ggml_library import ggml_library
from localspec.errors import LocalspecError, UsageError
from localspec.machine import rpc_build, rpc_client_patch

# ggml-rpc.cpp's commands (enum rpc_cmd) and the HELLO request's capability bytes (RPC_CONN_CAPS_SIZE)
_CMD_GET_DEVICE_MEMORY, _CMD_HELLO, _CMD_DEVICE_COUNT = 11, 14, 15
_CAPS_SIZE = 24
PROBE_TIMEOUT_S = 5.0


class RpcError(LocalspecError):
    """An RPC server that cannot be used: unreachable, another protocol, or no RPC backend here."""


@dataclass(frozen=True)
class RemoteDevice:
    index: int
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class RpcServer:
    endpoint: str  # HOST:PORT, as ggml names it
    version: tuple[int, int, int]
    devices: tuple[RemoteDevice, ...]


def parse_endpoints(text: str) -> list[str]:
    """HOST:PORT[,HOST:PORT...] into a list, each checked for a host and a port number."""
    endpoints = []
    for part in (piece.strip() for piece in text.split(",")):
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise UsageError(f"{part!r} is not an RPC server address: give HOST:PORT, such as 192.168.1.20:50052 "
                           "(several separated by commas).")
        endpoints.append(f"{host}:{int(port)}")
    return endpoints


def is_trusted_network(endpoint: str) -> bool:
    """Loopback or a private network: ggml-rpc-server has no authentication, so anything else is exposed."""
    host = endpoint.rpartition(":")[0].strip("[]")
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return all(ipaddress.ip_address(address.split("%")[0]).is_private for address in addresses)  # loopback is private too


def probe(endpoint: str, timeout_s: float = PROBE_TIMEOUT_S) -> RpcServer:
    """Ask the server at `endpoint` its protocol version and its devices' memory; RpcError if it cannot be used."""
    host, _, port = endpoint.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as connection:
            major, minor, patch = _request(connection, _CMD_HELLO, bytes(_CAPS_SIZE), 4 + _CAPS_SIZE)[:3]
            expected = rpc_build.protocol_version()
            if expected is not None and (major != expected[0] or minor > expected[1]):
                raise RpcError(
                    f"The RPC server at {endpoint} speaks protocol {major}.{minor}.{patch}; this llama.cpp speaks "
                    f"{expected[0]}.{expected[1]}.x. Build ggml-rpc-server from the same llama-cpp-python version "
                    f"({rpc_build.llama_cpp_version()}): `localspec rpc-build` prints where it is.")
            (count,) = struct.unpack("<I", _request(connection, _CMD_DEVICE_COUNT, b"", 4))
            devices = []
            for index in range(count):
                free, total = struct.unpack("<QQ", _request(connection, _CMD_GET_DEVICE_MEMORY, struct.pack("<I", index), 16))
                devices.append(RemoteDevice(index, free, total))
    except ValueError as exc:  # something answered, but not in the protocol
        raise RpcError(f"{endpoint} answered, but not as a ggml-rpc-server of this llama.cpp ({exc}). Check the port, and "
                       "that the server there is ggml-rpc-server from the same llama-cpp-python version.") from exc
    except OSError as exc:
        raise RpcError(f"Cannot reach the RPC server at {endpoint} ({exc}). Check that ggml-rpc-server runs there "
                       "(`ggml-rpc-server -H 0.0.0.0 -p PORT` on that machine) and that the port is open.") from exc
    return RpcServer(endpoint, (major, minor, patch), tuple(devices))


def _request(connection: socket.socket, command: int, payload: bytes, reply_size: int) -> bytes:
    """One command: | cmd (1 byte) | size (8) | payload |, answered by | size (8) | reply |."""
    connection.sendall(struct.pack("<BQ", command, len(payload)) + payload)
    (size,) = struct.unpack("<Q", _receive(connection, 8))
    if size != reply_size:
        raise ValueError(f"{size} bytes where {reply_size} were expected")
    return _receive(connection, size)


def _receive(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ValueError("the server closed the connection")
        data += chunk
    return data


_attached: set[str] = set()


def attach(endpoints: list[str]) -> list[RpcServer]:
    """Probe each server, then add its devices to ggml's list, where llama.cpp's next load finds them (once each)."""
    servers = [probe(endpoint) for endpoint in endpoints]
    registry = _rpc_registry()
    lib = ggml_library()
    address = lib.ggml_backend_reg_get_proc_address(registry, b"ggml_backend_rpc_add_server")
    if not address:
        raise RpcError("The RPC backend here has no ggml_backend_rpc_add_server: run `localspec rpc-build` again.")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(address)
    device_faults.add_check(_lost_check(registry))
    for server in servers:
        if server.endpoint in _attached:
            continue
        server_registry = add_server(server.endpoint.encode())
        if not server_registry:
            raise RpcError(f"ggml could not add the RPC server at {server.endpoint}; see llama.log for why.")
        lib.ggml_backend_register(server_registry)
        _attached.add(server.endpoint)
    return servers


def _rpc_registry() -> int:
    """The RPC backend: built into llama.cpp, or the module `rpc-build` made (loaded once)."""
    lib = ggml_library()
    registry = lib.ggml_backend_reg_by_name(b"RPC")
    if registry:
        return registry
    if not rpc_build.is_built():
        stale = " again: the one there was built by an older localspec" if rpc_build.module_path().is_file() else " once"
        raise RpcError(f"This llama.cpp has no RPC backend. Run `localspec rpc-build`{stale} (a few minutes: it builds "
                       "the RPC backend from the llama.cpp that llama-cpp-python ships), then try again.")
    module = rpc_build.module_path()
    registry = lib.ggml_backend_load(str(module).encode())
    if not registry:
        raise RpcError(f"{module} could not be loaded (see llama.log); run `localspec rpc-build` again.")
    return registry


_LostFunction = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_char_p)
_lost_checks: dict[int, device_faults.Check] = {}
_in_use: list[str] = []  # the servers the loaded models use: only their loss ends an answer


def use(endpoints: list[str]) -> None:
    """The servers the next load uses (none: a local load, which a server lost earlier must not disturb)."""
    _in_use[:] = endpoints


def _lost_check(registry: int) -> device_faults.Check:
    """The engine's after-decode check for this backend: a message naming the lost server, or None.
    A backend without localspec's patch (an RPC built into llama.cpp by hand) has no count: it aborts as ggml does."""
    if registry in _lost_checks:
        return _lost_checks[registry]
    address = ggml_library().ggml_backend_reg_get_proc_address(registry, rpc_client_patch.LOST_FUNCTION.encode())
    lost = _LostFunction(address) if address else None

    def check() -> str | None:
        gone = [endpoint for endpoint in _in_use if lost is not None and lost(endpoint.encode()) > 0]
        if not gone:
            return None
        return (f"The RPC server at {gone[0]} stopped answering (it quit, or the network between us dropped): the answer "
                "ends here, and what was written is kept. Start ggml-rpc-server there again, then load the pair again.")

    _lost_checks[registry] = check
    return check
