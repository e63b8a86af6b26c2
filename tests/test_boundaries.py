"""The engine stands alone: it never imports textual, directly or through anything it imports."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import localspec.engine

ENGINE_DIR = Path(localspec.engine.__file__).parent


def test_no_engine_module_mentions_textual():
    for path in ENGINE_DIR.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n == "textual" or n.startswith("textual.") for n in names), f"{path.name} imports textual"


def test_importing_the_whole_engine_loads_no_textual():
    modules = [f"localspec.engine.{m.name}" for m in pkgutil.iter_modules([str(ENGINE_DIR)])]
    assert len(modules) >= 10
    code = f"import sys; import {', '.join(modules)}; print('textual' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
