"""The H200 load crash (issue 45), rebuilt in miniature: a library that carries its own copy of a libstdc++ template,
as a CUDA build's libggml-cuda does, sits before libstdc++ in libllama's search list, so libllama's stream calls
bound to that copy. Importing localspec puts libstdc++ in the global scope first, and every library binds its own.

`libstand-in.so` plays libllama (it writes a long to a stream); `libcopy.so` plays libggml-cuda (it defines
`std::ostream::_M_insert<long>` and counts its calls). The stand-in links the copy before libstdc++, as libllama's
search list had libggml-cuda before libstdc++ on the H200.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the ELF symbol scopes of Linux's loader")

COPY = r"""
#include <ostream>
int copy_calls = 0;
// std::ostream::_M_insert<long>, by its mangled name: the copy nvcc's host code leaves in libggml-cuda.
extern "C" std::ostream &copied_insert(std::ostream *out, long) __asm__("_ZNSo9_M_insertIlEERSoT_");
extern "C" std::ostream &copied_insert(std::ostream *out, long) { ++copy_calls; return *out; }
extern "C" int copied_calls() { return copy_calls; }
"""

STAND_IN = r"""
#include <sstream>
#include <string>
extern "C" int write_a_long(char *out, int size) {
    std::ostringstream text;
    text << 1234567L;
    std::string s = text.str();
    return s.copy(out, size - 1);
}
"""

CHILD = """
import ctypes, json, sys
if sys.argv[2] == "localspec":
    import localspec
copy = ctypes.CDLL(sys.argv[1] + "/libcopy.so")
stand_in = ctypes.CDLL(sys.argv[1] + "/libstand-in.so")
buffer = ctypes.create_string_buffer(32)
n = stand_in.write_a_long(buffer, 32)
print(json.dumps([buffer.value[:n].decode(), copy.copied_calls()]))
"""


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.fail("a C++ compiler is needed (llama-cpp-python's build needs one too): install g++")
    out = tmp_path_factory.mktemp("cxx-runtime")
    (out / "copy.cpp").write_text(COPY)
    (out / "stand-in.cpp").write_text(STAND_IN)
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", out / "libcopy.so", out / "copy.cpp"], check=True)
    # -Wl,--no-as-needed keeps the copy in the stand-in's search list ahead of libstdc++, as libllama's had libggml-cuda.
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", out / "libstand-in.so", out / "stand-in.cpp",
                    "-Wl,--no-as-needed", f"-L{out}", "-lcopy", f"-Wl,-rpath,{out}"], check=True)
    return out


def written(libraries: Path, first: str) -> tuple[str, int]:
    child = subprocess.run([sys.executable, "-c", CHILD, str(libraries), first], capture_output=True, text=True, timeout=60)
    assert child.returncode == 0, child.stderr
    text, calls = json.loads(child.stdout)
    return text, calls


def test_without_localspec_the_copy_takes_the_stream_call(libraries: Path):
    """The hazard is real here: the stand-in's call lands in the copy, which writes nothing (on the H200 it read a
    locale facet past the end of the process's list, and the load died)."""
    assert written(libraries, "bare") == ("", 1)


def test_after_importing_localspec_libstdcxx_takes_it(libraries: Path):
    assert written(libraries, "localspec") == ("1234567", 0)
