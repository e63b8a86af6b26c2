"""The change localspec makes to ggml's RPC client before building it: a lost server is an error, not an abort.

Why: ggml-rpc.cpp's client calls GGML_ABORT when a server stops answering (RPC_STATUS_ASSERT), which kills the
whole process: the app, the server and every answer in them. Patched, the client marks that connection lost,
skips every later command on it (zeroing the replies it would have read), and counts, per server, the lost
connections that are still in use; `localspec_rpc_lost(endpoint)`, reached through the backend's proc-address table like
`ggml_backend_rpc_add_server`, tells the engine after each decode, which then ends the answer with a clear error
before any token read from the zeroed logits is shown. A load after the server is back opens a new connection
(a lost one is never handed out again).

Each edit names the exact text it replaces; a tree where that text is missing (another llama.cpp) is refused
rather than built half-patched.
"""

from __future__ import annotations

from pathlib import Path

# Raise it whenever the edits change: a module built with another level is rebuilt (rpc_build.is_built).
PATCH_LEVEL = 1
LOST_FUNCTION = "localspec_rpc_lost"

_LOST_STATE = """\
// localspec: the lost connections still in use, by endpoint (a reading of a dead server's memory makes one too,
// for a moment, so the engine asks only about the servers its models use). Never freed: a dispatcher may outlive
// static destruction at exit.
static std::mutex                           & localspec_lost_mutex = *new std::mutex();
static std::unordered_map<std::string, int> & localspec_lost = *new std::unordered_map<std::string, int>();

void rpc_dispatcher::mark_lost() {
    if (!lost.exchange(true)) {
        GGML_LOG_ERROR("RPC server %s stopped answering\\n", endpoint.c_str());
        std::lock_guard<std::mutex> lock(localspec_lost_mutex);
        localspec_lost[endpoint]++;
    }
}

static int localspec_rpc_lost(const char * endpoint) {
    std::lock_guard<std::mutex> lock(localspec_lost_mutex);
    auto it = localspec_lost.find(endpoint);
    return it == localspec_lost.end() ? 0 : it->second;
}

"""

EDITS: tuple[tuple[str, str], ...] = (
    (  # the dispatcher remembers its endpoint and whether it is lost
        "    rpc_msg_queue    queue;\n    socket_ptr       sock;\n    std::atomic_bool running;\n    std::thread      thread;\n};\n",
        "    rpc_msg_queue    queue;\n    socket_ptr       sock;\n    std::atomic_bool running;\n    std::thread      thread;\n"
        "public:\n    std::atomic_bool lost{false};\n    std::string      endpoint;\n    void mark_lost();\n};\n",
    ),
    (
        "static void rpc_dispatcher_trampoline(rpc_dispatcher * dispatcher)\n",
        _LOST_STATE + "static void rpc_dispatcher_trampoline(rpc_dispatcher * dispatcher)\n",
    ),
    (  # a handshake that fails is reported, not asserted
        "    bool status = send_rpc_cmd(sock, RPC_CMD_HELLO, &request, sizeof(request), &response, sizeof(response));\n"
        "    RPC_STATUS_ASSERT(status);\n",
        "    bool status = send_rpc_cmd(sock, RPC_CMD_HELLO, &request, sizeof(request), &response, sizeof(response));\n"
        "    if (!status) {\n        return false;\n    }\n",
    ),
    (  # a server that cannot be reached gives a lost connection
        "    sock = socket_t::connect(host.c_str(), port);\n    if (sock == nullptr) {\n"
        "        GGML_ABORT(\"Failed to connect to %s\\n\", endpoint.c_str());\n    }\n"
        "    if (!negotiate_hello(sock)) {\n        GGML_ABORT(\"RPC handshake failed for %s\\n\", endpoint.c_str());\n    }\n",
        "    this->endpoint = endpoint;\n    sock = socket_t::connect(host.c_str(), port);\n"
        "    if (sock == nullptr || !negotiate_hello(sock)) {\n        mark_lost();\n    }\n",
    ),
    (  # a command that fails marks the connection lost; later ones are skipped, their replies zeroed
        "        if (msg_ptr->cmd != RPC_CMD_NONE) {\n"
        "            if (msg_ptr->output) {\n"
        "                bool status = send_rpc_cmd(sock, msg_ptr->cmd, msg_ptr->input.get(), msg_ptr->input_size, "
        "msg_ptr->output, msg_ptr->output_size);\n"
        "                RPC_STATUS_ASSERT(status);\n"
        "            } else {\n"
        "                bool status = send_rpc_cmd(sock, msg_ptr->cmd, msg_ptr->input.get(), msg_ptr->input_size);\n"
        "                RPC_STATUS_ASSERT(status);\n"
        "            }\n"
        "        }\n",
        "        if (msg_ptr->cmd != RPC_CMD_NONE) {\n"
        "            bool status = !lost;\n"
        "            if (status && msg_ptr->output) {\n"
        "                status = send_rpc_cmd(sock, msg_ptr->cmd, msg_ptr->input.get(), msg_ptr->input_size, "
        "msg_ptr->output, msg_ptr->output_size);\n"
        "            } else if (status) {\n"
        "                status = send_rpc_cmd(sock, msg_ptr->cmd, msg_ptr->input.get(), msg_ptr->input_size);\n"
        "            }\n"
        "            if (!status) {\n"
        "                mark_lost();\n"
        "                if (msg_ptr->output) {\n"
        "                    memset(msg_ptr->output, 0, msg_ptr->output_size);\n"
        "                }\n"
        "            }\n"
        "        }\n",
    ),
    (
        "rpc_dispatcher::~rpc_dispatcher() {\n    running = false;\n",
        "rpc_dispatcher::~rpc_dispatcher() {\n    if (lost) {\n        std::lock_guard<std::mutex> lock(localspec_lost_mutex);\n"
        "        localspec_lost[endpoint]--;\n    }\n    running = false;\n",
    ),
    (  # a lost connection is never handed out again: the next load connects anew
        "        if (auto dispatcher = it->second.lock()) {\n",
        "        if (auto dispatcher = it->second.lock(); dispatcher && !dispatcher->lost) {\n",
    ),
    (
        "    if (std::strcmp(name, \"ggml_backend_rpc_add_server\") == 0) {\n",
        f"    if (std::strcmp(name, \"{LOST_FUNCTION}\") == 0) {{\n        return (void *){LOST_FUNCTION};\n    }}\n"
        "    if (std::strcmp(name, \"ggml_backend_rpc_add_server\") == 0) {\n",
    ),
)


class PatchError(Exception):
    """The vendored ggml-rpc.cpp is not the one these edits were written for."""


def apply(tree: Path) -> None:
    """Edit the llama.cpp tree's ggml-rpc.cpp in place (each edit must match exactly once)."""
    source = tree / "ggml" / "src" / "ggml-rpc" / "ggml-rpc.cpp"
    text = source.read_text()
    for old, new in EDITS:
        if text.count(old) != 1:
            raise PatchError(f"{source} does not hold the expected text once:\n{old}")
        text = text.replace(old, new)
    source.write_text(text)
