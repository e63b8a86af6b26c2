"""Downloads against the loopback hub: complete, resumed, verified, refused with a reason, shared with huggingface-hub."""

from __future__ import annotations

import hashlib
import os
import struct
from dataclasses import replace

import pytest
from huggingface_hub import try_to_load_from_cache

from localspec.catalog.models_toml import ModelRef
from localspec.catalog.pair_files import check_pair_headers, requests_for
from localspec.hub import cache
from localspec.hub.download import Downloader, FileRequest
from localspec.hub.errors import DownloadCancelled, HashMismatchError, HubError
from localspec.hub.progress import DownloadProgress, Phase
from tests.hub_server import Fault, LoopbackHub

REPO = "org/model-GGUF"


def noise(n: int, seed: int) -> bytes:
    """Deterministic bytes that differ everywhere, so a misplaced resume cannot hash right by luck."""
    out = bytearray()
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:n])


def payload(n: int, seed: int = 0) -> bytes:
    """An n-byte GGUF file (every pulled .gguf is checked to be one): one int8 tensor holding noise after the header."""
    name = b"noise"
    header = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + struct.pack("<Q", len(name)) + name + struct.pack("<I", 1)
    data_start = -(-(len(header) + 8 + 12) // 32) * 32  # the tensor's shape, type and offset, then GGUF's 32-byte alignment
    if n < data_start + 1:
        return noise(n, seed)  # too small to be a GGUF: only for files the tests never finish pulling
    header += struct.pack("<Q", n - data_start) + struct.pack("<IQ", 24, 0)  # GGML_TYPE_I8 = 24, at offset 0
    return header + bytes(data_start - len(header)) + noise(n - data_start, seed)


def downloader(config, events: list[DownloadProgress] | None = None, **kwargs) -> Downloader:
    return Downloader(config, on_progress=events.append if events is not None else None, retry_waits_s=(0.01, 0.01), **kwargs)


def test_full_pull_lands_in_the_shared_hf_cache(hub: LoopbackHub, hub_config):
    files = {"a.gguf": payload(3_000_000, 1), "b.gguf": payload(1_500_000, 2)}
    for name, data in files.items():
        hub.add_file(REPO, name, data=data)
    events: list[DownloadProgress] = []
    paths = downloader(hub_config, events).pull([FileRequest(REPO, name) for name in files])
    for path, (name, data) in zip(paths, files.items()):
        assert path.read_bytes() == data
        assert path.is_symlink() and path.resolve().parent.name == "blobs"  # the standard layout
        assert path.resolve().name == hashlib.sha256(data).hexdigest()
        # huggingface-hub itself finds the file: other tools share what we download
        assert try_to_load_from_cache(REPO, name, cache_dir=hub_config.cache_dir) == str(path)
    assert not list(cache.repo_dir(hub_config, REPO).glob("blobs/*.incomplete"))
    done = [e for e in events if e.phase is Phase.DONE]
    assert [e.file_index for e in done] == [1, 2]
    assert done[-1].total_done == done[-1].total_total == sum(map(len, files.values()))
    totals = [e.total_done for e in events if e.phase is Phase.DOWNLOADING]
    assert totals == sorted(totals)  # progress only moves forward
    # a second pull finds everything cached and asks the hub nothing
    before = len(hub.log)
    assert downloader(hub_config).pull([FileRequest(REPO, name) for name in files]) == paths
    assert len(hub.log) == before


def test_a_cut_connection_resumes_with_a_range_request(hub: LoopbackHub, hub_config):
    data = payload(4_000_000, 3)
    served = hub.add_file(REPO, "m.gguf", data=data)
    hub.fail(served.sha256, Fault("cut", after_bytes=1_234_567))
    events: list[DownloadProgress] = []
    [path] = downloader(hub_config, events).pull([FileRequest(REPO, "m.gguf")])
    assert path.read_bytes() == data
    gets = hub.requests("cdn", "GET")
    assert [g.range for g in gets] == [None, "bytes=1234567-"]
    assert any(e.phase is Phase.RETRYING for e in events)


def test_an_interrupted_pull_resumes_in_the_next_run(hub: LoopbackHub, hub_config):
    data = payload(5_000_000, 4)
    served = hub.add_file(REPO, "m.gguf", data=data)
    hub.fail(served.sha256, Fault("cut", after_bytes=1_000_000))  # the connection drops after 1 MB...
    hub.fail(served.sha256, Fault("status", times=-1, status=503, skip=1))  # ...and the server stays down
    with pytest.raises(HubError, match=r"stopped at 1\.0 MB of 5\.0 MB after 2 retries \(HTTP 503\)\. The partial file is kept: run the same pull again"):
        downloader(hub_config).pull([FileRequest(REPO, "m.gguf")])
    partial = cache.partial_path(hub_config, REPO, served.sha256)
    assert partial.stat().st_size == 1_000_000
    hub.faults.clear()  # the server is back
    [path] = downloader(hub_config).pull([FileRequest(REPO, "m.gguf")])
    assert path.read_bytes() == data
    assert hub.requests("cdn", "GET")[-1].range == "bytes=1000000-"


def test_retries_continue_while_each_attempt_gets_further(hub: LoopbackHub, hub_config):
    data = payload(5_000_000, 11)
    served = hub.add_file(REPO, "m.gguf", data=data)
    hub.fail(served.sha256, Fault("cut", times=-1, after_bytes=1_000_000))  # a flaky link: every connection drops after 1 MB
    [path] = downloader(hub_config).pull([FileRequest(REPO, "m.gguf")])  # two retries allowed, five attempts needed
    assert path.read_bytes() == data
    assert [g.range for g in hub.requests("cdn", "GET")] == [None] + [f"bytes={n}000000-" for n in (1, 2, 3, 4)]


def test_cancel_keeps_the_partial_file_and_the_next_pull_resumes(hub: LoopbackHub, hub_config):
    data = payload(6_000_000, 5)
    served = hub.add_file(REPO, "m.gguf", data=data)
    # Slow enough that the cancel, asked for at 2 MB, lands well before the end even on a loaded machine
    # (progress is reported at most every 0.1 s: 400 kB here, against 4 MB still to come).
    hub.fail(served.sha256, Fault("slow", bytes_per_second=4_000_000))

    pulling = downloader(hub_config)

    def cancel_after_two_megabytes(progress: DownloadProgress) -> None:
        if progress.file_done >= 2_000_000:
            pulling.cancel.set()

    pulling.on_progress = cancel_after_two_megabytes
    with pytest.raises(DownloadCancelled, match="run the pull again to resume"):
        pulling.pull([FileRequest(REPO, "m.gguf")])
    kept = cache.partial_path(hub_config, REPO, served.sha256).stat().st_size
    assert 2_000_000 <= kept < len(data)
    [path] = downloader(hub_config).pull([FileRequest(REPO, "m.gguf")])
    assert path.read_bytes() == data
    assert hub.requests("cdn", "GET")[-1].range == f"bytes={kept}-"


def test_corrupted_bytes_are_caught_and_the_bad_file_removed(hub: LoopbackHub, hub_config):
    data = payload(2_000_000, 6)
    served = hub.add_file(REPO, "m.gguf", data=data)
    hub.fail(served.sha256, Fault("corrupt", after_bytes=777_777))
    damaged = rf"org/model-GGUF/m.gguf arrived damaged: its sha256 is [0-9a-f]{{64}}, the hub's is {served.sha256}\. The bad file was removed"
    with pytest.raises(HashMismatchError, match=damaged):
        downloader(hub_config).pull([FileRequest(REPO, "m.gguf")])
    assert not cache.partial_path(hub_config, REPO, served.sha256).exists()
    assert cache.cached_path(hub_config, REPO, "m.gguf") is None
    [path] = downloader(hub_config).pull([FileRequest(REPO, "m.gguf")])  # the fault was one-off
    assert path.read_bytes() == data


def test_server_errors_are_retried_on_the_cdn_and_reported_from_the_hub(hub: LoopbackHub, hub_config):
    served = hub.add_file(REPO, "m.gguf", data=payload(100_000, 7))
    hub.fail(served.sha256, Fault("status", status=503))
    [path] = downloader(hub_config).pull([FileRequest(REPO, "m.gguf")])  # one 503 from the CDN, then success
    assert path.stat().st_size == 100_000
    hub.add_file(REPO, "n.gguf", data=payload(10, 8))
    hub.fail(f"{REPO}/n.gguf", Fault("status", times=-1, status=500))
    with pytest.raises(HubError, match=r"The hub answered HTTP 500 for org/model-GGUF/n.gguf\. Try again later"):
        downloader(hub_config).pull([FileRequest(REPO, "n.gguf")])


def test_a_gated_repo_names_itself_and_the_remedy(hub: LoopbackHub, hub_config):
    hub.add_file("meta/gated-GGUF", "m.gguf", data=payload(50_000, 9))
    hub.gate("meta/gated-GGUF", "hf_accepted")
    for token in (False, "hf_not_accepted"):
        with pytest.raises(HubError) as caught:
            downloader(replace(hub_config, token=token)).pull([FileRequest("meta/gated-GGUF", "m.gguf")])
        message = str(caught.value)
        assert "meta/gated-GGUF is a gated repository" in message
        assert f"{hub.endpoint}/meta/gated-GGUF" in message and "accept its license" in message and "HF_TOKEN" in message
    [path] = downloader(replace(hub_config, token="hf_accepted")).pull([FileRequest("meta/gated-GGUF", "m.gguf")])
    assert path.stat().st_size == 50_000
    assert hub.requests("hub")[-1].authorization == "Bearer hf_accepted"
    assert all(r.authorization is None for r in hub.requests("cdn"))  # the token never leaves the hub


def test_missing_repos_and_files_say_what_to_check(hub: LoopbackHub, hub_config):
    hub.add_file(REPO, "m.gguf", data=b"x")
    with pytest.raises(HubError, match=r"org/nothing-GGUF was not found on the hub .* Check the repository id"):
        downloader(hub_config).pull([FileRequest("org/nothing-GGUF", "m.gguf")])
    with pytest.raises(HubError, match=rf"org/model-GGUF has no file q8.gguf\. See the repository's files at {hub.endpoint}/org/model-GGUF/tree/main"):
        downloader(hub_config).pull([FileRequest(REPO, "q8.gguf")])


def test_offline_mode_uses_the_cache_and_refuses_the_rest(hub: LoopbackHub, hub_config):
    hub.add_file(REPO, "m.gguf", data=payload(1000, 10))
    [path] = downloader(hub_config).pull([FileRequest(REPO, "m.gguf")])
    hub.stop()
    offline = replace(hub_config, offline=True)
    assert downloader(offline).pull([FileRequest(REPO, "m.gguf")]) == [path]
    with pytest.raises(HubError, match=r"HF_HUB_OFFLINE is set and org/model-GGUF/other.gguf is not in the Hugging Face cache"):
        downloader(offline).pull([FileRequest(REPO, "other.gguf")])
    hub.start()  # the fixture stops it again


def test_free_space_is_checked_before_any_byte_is_fetched(hub: LoopbackHub, hub_config):
    hub.add_file(REPO, "huge.gguf", data=b"GGUF", size=10**15)  # the hub announces a petabyte
    with pytest.raises(HubError, match=r"Not enough free disk space in .*: the download needs 1000\.0 TB .* Free some space, or set HF_HOME"):
        downloader(hub_config).pull([FileRequest(REPO, "huge.gguf")])
    assert not hub.requests("cdn")


def test_split_sets_are_fetched_whole(hub: LoopbackHub, hub_config):
    parts = [payload(300_000 + i, 20 + i) for i in range(3)]
    for i, data in enumerate(parts, start=1):
        hub.add_file(REPO, f"big-q4_k_m-{i:05d}-of-00003.gguf", data=data)
    ref = ModelRef(repo=REPO, file="big-q4_k_m-00001-of-00003.gguf")
    paths = downloader(hub_config).pull(requests_for(ref))
    assert [p.read_bytes() for p in paths] == parts
    assert [p.name for p in paths] == [f"big-q4_k_m-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]


def test_header_only_check_over_http(hub: LoopbackHub, hub_config, tiny):
    for name in ("target", "near", "other_vocab"):
        hub.add_file(f"tiny/{name}-GGUF", f"{name}.gguf", path=tiny[name])
    target = ModelRef(repo="tiny/target-GGUF", file="target.gguf")
    good = check_pair_headers(hub_config, target, ModelRef(repo="tiny/near-GGUF", file="near.gguf"))
    assert good.compatible and good.target.remote and good.draft.remote
    assert good.target.summary.architecture == "llama" and good.target.summary.n_vocab == good.draft.summary.n_vocab
    other = check_pair_headers(hub_config, target, ModelRef(repo="tiny/other_vocab-GGUF", file="other_vocab.gguf"))
    assert other.compatible and other.tokenizers_differ.startswith("token 100 is")  # it drafts through text
    assert all(r.range and r.range.startswith("bytes=") and not r.range.endswith("-") for r in hub.requests("cdn", "GET"))
    assert cache.cached_path(hub_config, "tiny/target-GGUF", "target.gguf") is None  # nothing was downloaded


def test_the_lock_keeps_two_pulls_of_one_blob_apart(hub: LoopbackHub, hub_config):
    from filelock import FileLock

    served = hub.add_file(REPO, "m.gguf", data=payload(1000, 30))
    lock = cache.lock_path(hub_config, REPO, served.sha256)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(lock):  # another process (ours, or huggingface-hub's) is writing this blob
        with pytest.raises(HubError, match=r"Another download of org/model-GGUF/m.gguf is running"):
            downloader(hub_config).pull([FileRequest(REPO, "m.gguf")])
    assert os.path.exists(downloader(hub_config).pull([FileRequest(REPO, "m.gguf")])[0])


def test_remove_deletes_the_blob_and_the_link(hub: LoopbackHub, hub_config):
    hub.add_file(REPO, "m.gguf", data=payload(4096, 31))
    [path] = downloader(hub_config).pull([FileRequest(REPO, "m.gguf")])
    blob = path.resolve()
    assert cache.remove(hub_config, REPO, "m.gguf") == 4096
    assert not path.exists() and not blob.exists()
    assert cache.remove(hub_config, REPO, "m.gguf") == 0


def test_the_progress_line_fits_the_terminal_so_it_redraws_in_place():
    """With real file names the line ran to ~125 characters: at 100 and 120 columns it wrapped, and every refresh printed a new line."""
    import io

    from localspec.cli.progress_bar import ProgressBar, render

    name = "Qwen/Qwen2.5-Coder-32B-Instruct-GGUF/qwen2.5-coder-32b-instruct-q4_k_m-00001-of-00005.gguf"
    progress = DownloadProgress(name, Phase.DOWNLOADING, 1, 2, 412_000_000, 3_993_000_000, 412_000_000, 5_000_000_000, 38_100_000.0)
    for columns in (40, 60, 80, 100, 120, 200):
        line = render(progress, columns)
        assert len(line) < columns, (columns, line)
        assert line.startswith("[1/2] qwen2.") and "412.0 MB / 4.0 GB" in line  # the count, the name's ends, the bytes stay
        assert ("ETA 02:00" in line) == (columns >= 60) and ("░" in line) == (columns >= 200)

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    bar = ProgressBar(terminal)
    for done in range(0, 3_993_000_000, 500_000_000):
        bar(DownloadProgress(name, Phase.DOWNLOADING, 1, 2, done, 3_993_000_000, done, 5_000_000_000, 38_100_000.0))
    assert "\n" not in terminal.getvalue() and terminal.getvalue().count("\r") == 8  # redrawn in place
