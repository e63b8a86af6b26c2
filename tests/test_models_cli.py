"""`localspec pull / list / rm / check` as a user runs them, against the loopback hub, tiny models and the real pair."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import real_pair
from tests.conftest import cli
from tests.eagle3_models import Head, eagle3_head
from tests.hub_server import Fault, LoopbackHub
from tests.tiny_models import TinySpec, write_tiny_model


def write_user_catalog(env: dict[str, str], text: str) -> Path:
    path = Path(env["XDG_CONFIG_HOME"]) / "localspec" / "models.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def tiny_pair(pair_id: str, target: str, draft: str) -> str:
    return (
        f'[[pair]]\nid = "{pair_id}"\ntitle = "Tiny {pair_id}"\ndraft_max = 2\n'
        f'[pair.target]\nrepo = "tiny/{target}-GGUF"\nfile = "{target}.gguf"\n'
        f'[pair.draft]\nrepo = "tiny/{draft}-GGUF"\nfile = "{draft}.gguf"\n'
    )


@pytest.fixture
def wrong_head(tiny: dict[str, Path], tmp_path: Path) -> Path:
    """An EAGLE-3 head that reads layers 1-3 of a target, for the two-block tiny target: made for another model."""
    return eagle3_head(tiny["target"], tmp_path / "wrong_head.gguf", Head.RANDOM)


@pytest.fixture
def tiny_hub(hub: LoopbackHub, hub_env: dict[str, str], tiny: dict[str, Path], wrong_head: Path) -> LoopbackHub:
    for name, path in (*((name, tiny[name]) for name in ("target", "near", "other_vocab")), ("wrong_head", wrong_head)):
        hub.add_file(f"tiny/{name}-GGUF", f"{name}.gguf", path=path)
    write_user_catalog(hub_env, tiny_pair("tiny", "target", "near") + tiny_pair("tiny-bad", "target", "wrong_head"))
    return hub


def row(listing: str, pair_id: str) -> str:
    """The pair's line of `localspec list`, without the default marker: id, downloaded, size..."""
    return next(line[2:] for line in listing.splitlines() if re.match(rf"^[* ] {re.escape(pair_id)}\s", line))


def test_pull_list_generate_check_rm(tiny_hub: LoopbackHub, hub_env: dict[str, str], tiny: dict[str, Path]):
    assert row(cli("list", env=hub_env).stdout, "tiny").split()[1] == "no"
    pulled = cli("pull", "tiny", env=hub_env)
    assert pulled.returncode == 0, pulled.stderr
    assert "compatible: the draft shares the target's gpt2 vocabulary" in pulled.stdout  # checked before the download
    assert "[1/2] target.gguf" in pulled.stderr and "[2/2] near.gguf" in pulled.stderr  # progress, one line per phase off a terminal
    assert "tiny is ready" in pulled.stdout

    listing = cli("list", env=hub_env).stdout
    assert row(listing, "tiny").split()[1] == "yes"
    size = tiny["target"].stat().st_size + tiny["near"].stat().st_size
    assert f"{size / 1000:.1f} KB" in row(listing, "tiny") or f"{size / 1e6:.1f} MB" in row(listing, "tiny")

    generated = cli("generate", "--pair", "tiny", "--prompt", "hello", "--max-tokens", "8", "--json", env=hub_env)
    assert generated.returncode == 0, generated.stderr
    assert '"draft_n"' in generated.stdout

    checked = cli("check", "tiny", env=hub_env)
    assert checked.returncode == 0 and checked.stdout.count("header read from disk") == 2

    refused = cli("rm", "tiny", env=hub_env)  # not a terminal: it will not ask, so it refuses
    assert refused.returncode == 2 and "Add --yes" in refused.stderr and row(cli("list", env=hub_env).stdout, "tiny").split()[1] == "yes"
    partial = Path(hub_env["HF_HOME"]) / "hub" / "models--tiny--near-GGUF" / "blobs" / "0123abcd.incomplete"
    partial.write_bytes(b"half a download")  # what an interrupted pull of another revision leaves
    removed = cli("rm", "tiny", "--yes", env=hub_env)
    assert removed.returncode == 0 and removed.stdout.count("removed tiny/") == 2
    assert "removed partial download 0123abcd.incomplete" in removed.stdout and not partial.exists()
    assert row(cli("list", env=hub_env).stdout, "tiny").split()[1] == "no"
    assert "is not downloaded yet" in cli("generate", "--pair", "tiny", "--prompt", "x", env=hub_env).stderr


def test_an_incompatible_pair_is_refused_before_the_download(tiny_hub: LoopbackHub, hub_env: dict[str, str]):
    result = cli("pull", "tiny-bad", env=hub_env)
    assert result.returncode == 1
    assert "incompatible: " in result.stderr and "EAGLE-3 head for another model" in result.stderr
    gets = tiny_hub.requests("cdn", "GET")
    assert gets and all(re.fullmatch(r"bytes=\d+-\d+", g.range or "") for g in gets)  # header ranges only, never a whole file
    assert row(cli("list", env=hub_env).stdout, "tiny-bad").split()[1] == "no"


def test_hub_file_form_and_offline_mode(tiny_hub: LoopbackHub, hub_env: dict[str, str]):
    result = cli("pull", "tiny/target-GGUF/target.gguf", env=hub_env)
    assert result.returncode == 0 and result.stdout.strip().endswith("target.gguf")
    assert cli("pull", "tiny", env=hub_env).returncode == 0
    tiny_hub.stop()
    offline = {**hub_env, "HF_HUB_OFFLINE": "1"}
    again = cli("pull", "tiny", env=offline)
    assert again.returncode == 0 and "tiny is ready" in again.stdout
    assert cli("check", "tiny", env=offline).returncode == 0
    refused = cli("pull", "tiny/other_vocab-GGUF/other_vocab.gguf", env=offline)
    assert refused.returncode == 1
    assert "HF_HUB_OFFLINE is set and tiny/other_vocab-GGUF/other_vocab.gguf is not in the Hugging Face cache" in refused.stderr
    tiny_hub.start()


def test_gated_repo_through_the_command_line(tiny_hub: LoopbackHub, hub_env: dict[str, str]):
    tiny_hub.gate("tiny/target-GGUF", "hf_license_accepted")
    refused = cli("pull", "tiny/target-GGUF/target.gguf", env=hub_env)
    assert refused.returncode == 1
    assert "tiny/target-GGUF is a gated repository" in refused.stderr and "set HF_TOKEN" in refused.stderr
    assert "Traceback" not in refused.stderr
    allowed = cli("pull", "tiny/target-GGUF/target.gguf", env={**hub_env, "HF_TOKEN": "hf_license_accepted"})
    assert allowed.returncode == 0, allowed.stderr


def test_bad_names_and_bad_catalogs_get_clear_errors(tiny_hub: LoopbackHub, hub_env: dict[str, str]):
    assert "neither a pair id nor OWNER/REPO/FILE.gguf" in cli("pull", "tiny/target.gguf", env=hub_env).stderr
    missing = cli("pull", "tiny/target-GGUF/q8.gguf", env=hub_env)
    assert missing.returncode == 1 and "tiny/target-GGUF has no file q8.gguf" in missing.stderr
    # Issue 56: a path for a hub name ended in huggingface_hub's HFValidationError; an unknown pair id exited 1, not 2
    for command in (("pull", "no-such-pair"), ("rm", "no-such-pair", "--yes"), ("check", "no-such-pair")):
        unknown = cli(*command, env=hub_env)
        assert unknown.returncode == 2 and "No pair named 'no-such-pair'" in unknown.stderr, (command, unknown.stderr)
    path = write_user_catalog(hub_env, tiny_pair("tiny", "target", "near").replace("draft_max = 2", "draft_max = 99"))
    broken = cli("list", env=hub_env)
    assert broken.returncode == 1
    assert f"{path}, line 4, pair 'tiny', field draft_max: draft_max = 99; expected an integer from 1 to 32" in broken.stderr
    both = cli("check", "tiny", "--target", "x.gguf", env=hub_env)
    assert both.returncode == 2 and "not both" in both.stderr
    climbing = cli("pull", "../../etc/passwd.gguf", env=hub_env)
    assert climbing.returncode == 2 and "neither a pair id nor OWNER/REPO/FILE.gguf" in climbing.stderr and "Traceback" not in climbing.stderr


def test_the_real_pair_checks_pulls_resumes_and_verifies(hub: LoopbackHub, hub_env: dict[str, str], real_models):
    """The default catalog pair, served from the real Qwen files: the closing note's numbers come from here."""
    target_path, draft_path = real_models
    target = hub.add_file("Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", path=target_path)
    hub.add_file("Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", path=draft_path)

    checked = cli("check", "qwen2.5-coder-1.5b", env=hub_env)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.count("header read over HTTP") == 2
    assert "qwen2, 1.78 B parameters, Q4_K_M, context 32768, vocabulary gpt2 × 151936" in checked.stdout
    read = re.search(r"read ([\d.]+) MB of 1\.6 GB \(([\d.]+)%\)", checked.stdout)
    assert read and float(read[1]) < 20, checked.stdout  # megabytes, not gigabytes
    print(checked.stdout)

    # Interrupt the first pull hard (as a crash or a closed laptop would), partway through the target.
    hub.fail(target.sha256, Fault("slow", bytes_per_second=100_000_000))
    pulling = subprocess.Popen([sys.executable, "-m", "localspec", "pull", "qwen2.5-coder-1.5b"], env=hub_env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    partial = Path(hub_env["HF_HOME"]) / "hub" / "models--Qwen--Qwen2.5-Coder-1.5B-Instruct-GGUF" / "blobs" / f"{target.sha256}.incomplete"
    deadline = time.monotonic() + 120
    while not (partial.exists() and partial.stat().st_size > 200_000_000):
        assert time.monotonic() < deadline and pulling.poll() is None, "the pull never got 200 MB in"
        time.sleep(0.05)
    pulling.send_signal(signal.SIGKILL)
    pulling.wait()
    kept = partial.stat().st_size

    start = time.monotonic()
    resumed = cli("pull", "qwen2.5-coder-1.5b", "--skip-check", env=hub_env, timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    print(f"resumed from {kept} bytes; the rest of the pair arrived and was verified in {time.monotonic() - start:.1f} s")
    transfers = [r.range for r in hub.requests("cdn", "GET") if r.path.endswith(target.sha256) and not re.fullmatch(r"bytes=\d+-\d+", r.range or "")]
    assert transfers == [None, f"bytes={kept}-"]  # the killed run from byte 0, then the resume from where it stopped
    for path, model in ((target_path, real_pair.TARGET), (draft_path, real_pair.DRAFT)):
        blob = next((Path(hub_env["HF_HOME"]) / "hub").glob(f"models--Qwen--*/snapshots/*/{path.name}")).resolve()
        assert blob.name == model.sha256 and blob.stat().st_size == model.size
    assert not partial.exists()
    listing = cli("list", env=hub_env).stdout
    assert row(listing, "qwen2.5-coder-1.5b").split()[1:3] == ["yes", "1.6"]


def test_check_local_files_directly(tiny: dict[str, Path], hub_env: dict[str, str], tmp_path: Path):
    good = cli("check", "--target", str(tiny["target"]), "--draft", str(tiny["near"]), env=hub_env)
    assert good.returncode == 0 and "compatible" in good.stdout and good.stdout.count("header read from disk") == 2
    other = cli("check", "--target", str(tiny["target"]), "--draft", str(tiny["other_vocab"]), env=hub_env)
    assert other.returncode == 0 and "compatible through text: the draft's tokenizer is not the target's (token 100 is" in other.stdout
    assert "--drafter bridged" in other.stdout
    no_bos = write_tiny_model(tmp_path / "no-bos.gguf", TinySpec(seed=3, base_seed=1, noise=0.1, bos=None))  # Qwen3.5-0.8B's lack
    native = cli("check", "--target", str(tiny["target"]), "--draft", str(no_bos), env=hub_env)
    assert native.returncode == 0, native.stderr
    assert ("compatible: the draft drafts natively; bos differs (target 0, draft none), accepted: neither model puts a BOS "
            "in its prompts and all") in " ".join(native.stdout.split())
    missing = cli("check", "--target", str(tiny["target"]), "--draft", "./nowhere.gguf", env=hub_env)
    assert missing.returncode == 1 and "Model file not found: nowhere.gguf. Check the path" in missing.stderr


def test_a_hub_cache_that_cannot_be_written_is_a_clear_error(tiny_hub: LoopbackHub, hub_env: dict[str, str], tmp_path: Path):
    """A read-only HF_HOME once ended `pull` in an OSError traceback (a file stands where the folder should be: refused even to root)."""
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    result = cli("pull", "tiny", env={**hub_env, "HF_HOME": str(blocked / "hf")})
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert "a-file" in result.stderr and "a part of that path is a file, not a folder" in result.stderr  # advice by its cause


def half_of(source: Path, out: Path) -> Path:
    out.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    return out


def test_a_truncated_gguf_is_refused_by_check_generate_and_pull(tiny_hub: LoopbackHub, hub_env: dict[str, str], tiny: dict[str, Path], tmp_path: Path):
    """A GGUF cut in half once passed `check` (exit 0), made `generate` say "no reason given", and a pull of one reported done."""
    half = half_of(tiny["target"], tmp_path / "half.gguf")
    checked = cli("check", "--target", str(half), "--draft", str(tiny["near"]), env=hub_env)
    assert checked.returncode == 1 and "half.gguf is incomplete: its header describes" in checked.stderr, checked.stderr
    generated = cli("generate", "--target", str(half), "--prompt", "hi", env=hub_env)
    assert generated.returncode == 1 and "is incomplete" in generated.stderr and "Traceback" not in generated.stderr

    folder = cli("check", "--target", str(tmp_path), "--draft", str(tiny["near"]), env=hub_env)
    assert folder.returncode == 1 and "is a directory, not a GGUF model file" in folder.stderr  # as generate says it

    tiny_hub.add_file("bad/half-GGUF", "half.gguf", path=half)
    (tmp_path / "notes.gguf").write_text("not a model at all")
    tiny_hub.add_file("bad/notes-GGUF", "notes.gguf", path=tmp_path / "notes.gguf")
    for spec, reason in (("bad/half-GGUF/half.gguf", "its header describes"), ("bad/notes-GGUF/notes.gguf", "is not a GGUF file")):
        pulled = cli("pull", spec, env=hub_env)
        assert pulled.returncode == 1 and "is not a usable GGUF file" in pulled.stderr and reason in pulled.stderr, pulled.stderr
        assert "Traceback" not in pulled.stderr


def test_llama_cpps_own_reason_reaches_the_user(tiny, tmp_path):
    """llama.cpp logs load errors at level 4 (ERROR); the log hook kept level 3 (WARN), so a failed load said "no reason given"."""
    from localspec.engine.errors import ModelLoadError
    from localspec.engine.llama.model import Model

    with pytest.raises(ModelLoadError, match="data is not within the file bounds"):
        Model(half_of(tiny["target"], tmp_path / "half.gguf"))
