"""`localspec doctor`, run as a user would, on this machine's own llama-cpp-python build."""

from __future__ import annotations

import os
import platform
import stat
from importlib import metadata
from pathlib import Path

import pytest

from localspec.engine.llama.hardware import gpu_offload_supported
from localspec.machine import amx_build
from localspec.machine.gpu_build import reinstall_command
from tests.conftest import cli

README = Path(__file__).resolve().parent.parent / "README.md"


@pytest.fixture
def user_env(tmp_path: Path, tiny) -> dict[str, str]:
    """A user with fresh directories and one downloaded pair of their own (the tiny models)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGING"))}
    env.update(HF_HOME=str(tmp_path / "hf-home"), XDG_CONFIG_HOME=str(tmp_path / "config"),
               XDG_DATA_HOME=str(tmp_path / "data"), XDG_STATE_HOME=str(tmp_path / "state"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    catalog = tmp_path / "config" / "localspec" / "models.toml"
    catalog.parent.mkdir(parents=True)
    catalog.write_text(f'[[pair]]\nid = "tiny"\ntitle = "Tiny"\n[pair.target]\npath = "{tiny["target"]}"\n'
                       f'[pair.draft]\npath = "{tiny["near"]}"\n')
    return env


def _line(output: str, label: str) -> str:
    return next(line.strip() for line in output.splitlines() if line.strip().startswith(label))


def test_doctor_reports_the_build_the_machine_the_paths_and_the_pairs(user_env, tmp_path):
    result = cli("doctor", env=user_env, timeout=120)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    out = result.stdout
    assert _line(out, "llama-cpp-python").split()[-1] == metadata.version("llama-cpp-python")
    assert platform.python_version() in _line(out, "Python")
    assert _line(out, "llama.cpp build").split(None, 2)[2].startswith("CPU :")  # llama_print_system_info
    if gpu_offload_supported():
        assert "no GPU offload" not in out
    else:  # this machine: a CPU build, and no layer goes anywhere else
        assert _line(out, "backend").endswith("CPU (this build has no GPU offload: every layer runs on the CPU)")
        assert _line(out, "GPUs").startswith("GPUs                none that llama.cpp can use")
        assert "yes          CPU only (no GPU offload in this build): RAM " in _line(out, "tiny")
    assert f"{os.cpu_count()} logical" in _line(out, "CPU cores")
    assert "available of" in _line(out, "RAM")
    amx = next((line.strip() for line in out.splitlines() if line.strip().startswith("AMX ")), "")  # only on a CPU with AMX
    python = _line(out, "Python").split("(")[1].rstrip(")")
    assert amx == "" or amx.split(None, 1)[1].startswith(("used: the AMX matmul checked right", "not used: the AMX matmul"))
    assert (amx_build.reinstall_command(f"{python} -m pip") in out) == amx.startswith("AMX                 not used")
    assert _line(out, "settings").endswith(str(tmp_path / "config" / "localspec" / "settings.json"))
    assert _line(out, "conversations").endswith(str(tmp_path / "data" / "localspec" / "history.sqlite3"))
    assert _line(out, "llama.cpp log").endswith(str(tmp_path / "state" / "localspec" / "log" / "llama.log"))
    assert _line(out, "models").startswith(f"models              {tmp_path / 'hf-home' / 'hub'}")
    assert _line(out, "qwen2.5-coder-1.5b").split()[1] == "no"  # a catalog pair this user has not downloaded


def test_doctor_says_how_to_rebuild_for_an_nvidia_gpu_the_build_cannot_use(user_env, tmp_path):
    """An NVIDIA driver that reports a GPU (a stand-in nvidia-smi on PATH) beside a llama-cpp-python without CUDA."""
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'NVIDIA GeForce RTX 4060 Laptop GPU, 8188, 7937'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    user_env["PATH"] = f"{fake.parent}{os.pathsep}{user_env['PATH']}"
    result = cli("doctor", env=user_env, timeout=120)
    assert result.returncode == 0, result.stderr
    if gpu_offload_supported():
        assert "CMAKE_ARGS" not in result.stdout  # the build already uses a GPU: nothing to rebuild
        return
    assert "NVIDIA GeForce RTX 4060 Laptop GPU (8.3 GB free of 8.6 GB, seen by the driver)" in _line(result.stdout, "GPUs")
    assert "An NVIDIA GPU is present (NVIDIA GeForce RTX 4060 Laptop GPU), but this llama-cpp-python was built without CUDA" in result.stdout
    python = _line(result.stdout, "Python").split("(")[1].rstrip(")")
    assert f'    CMAKE_ARGS="-DGGML_CUDA=on" {python} -m pip install --force-reinstall --no-cache-dir llama-cpp-python==' in result.stdout
    assert result.stdout.rstrip().endswith(reinstall_command(f"{python} -m pip", cuda=True))


def test_the_readme_gives_the_same_rebuild_commands_as_doctor():
    readme = README.read_text()
    lines = {line.strip() for line in readme.splitlines()}
    assert reinstall_command(".venv/bin/pip", cuda=True) in lines
    assert reinstall_command(".venv/bin/pip", cuda=False) in lines
    assert amx_build.reinstall_command(".venv/bin/pip", Path("$PWD/localspec/machine/amx_tilecfg_fix.h")) in lines
    assert "`localspec doctor`" in readme


def test_a_container_cpu_quota_caps_the_thread_count(tmp_path):
    """cgroup v2's cpu.max: "max" (no quota) or "QUOTA PERIOD"; llama.cpp gets no more threads than the quota's CPUs."""
    from localspec.engine.llama.hardware import cgroup_cpu_limit, physical_core_count

    cpu_max = tmp_path / "cpu.max"
    for text, cpus in (("max 100000\n", None), ("200000 100000\n", 2), ("150000 100000\n", 2), ("50000 100000\n", 1)):
        cpu_max.write_text(text)
        assert cgroup_cpu_limit(cpu_max) == cpus, text
    assert cgroup_cpu_limit(tmp_path / "absent") is None
    assert 1 <= physical_core_count() <= (cgroup_cpu_limit() or physical_core_count())
