"""Measure the app (in tmux: a real terminal, the panel open) against `localspec generate` on the same prompt.

Alternating rounds; the app's tok/s is read from the statistics it stores with each answer. Needs tmux and
the real pair in ~/.cache/localspec/test-models (the test suite fetches it). Run: .venv/bin/python tests/tools/app_vs_generate.py
"""
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

M = Path.home()/".cache/localspec/test-models"
T, D = M/"qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", M/"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
PROMPT = "Write a Python function that checks whether a number is prime."
root = Path(tempfile.mkdtemp())
shutil.rmtree(root, ignore_errors=True)
(root/"config/localspec").mkdir(parents=True)
(root/"config/localspec/models.toml").write_text(f'default = "q"\n[[pair]]\nid = "q"\ntitle = "Q"\n[pair.target]\npath = "{T}"\n[pair.draft]\npath = "{D}"\n')
tint = len(sys.argv) > 1 and sys.argv[1] == "tint"
(root/"config/localspec/settings.json").write_text(json.dumps({"max_tokens": 200, "last_pair": "q", "tint_accepted": tint}))
env = f"XDG_CONFIG_HOME={root}/config XDG_DATA_HOME={root}/data XDG_STATE_HOME={root}/state"


def cap() -> str:
    return subprocess.run(["tmux", "capture-pane", "-t", "ratio", "-p"], capture_output=True, text=True).stdout



subprocess.run(["tmux", "kill-session", "-t", "ratio"], stderr=subprocess.DEVNULL)
subprocess.run(["tmux", "new-session", "-d", "-s", "ratio", "-x", "120", "-y", "36", f"env {env} .venv/bin/localspec; sleep 600"], check=True)
while "layers on GPU" not in cap():
    time.sleep(0.5)
app_rates, cli_rates = [], []
db = root/"data/localspec/history.sqlite3"
for round_ in range(3):
    subprocess.run(["tmux", "send-keys", "-t", "ratio", "C-n"])
    time.sleep(0.5)
    subprocess.run(["tmux", "send-keys", "-t", "ratio", PROMPT, "Enter"])
    while True:
        time.sleep(1)
        rows = sqlite3.connect(db).execute("select status, stats from messages where role='assistant' order by id").fetchall()
        if len(rows) == round_ + 1 and rows[-1][0] == "complete":
            break
    s = json.loads(rows[-1][1])
    app_rates.append(1000 * s["predicted_n"] / s["predicted_ms"])
    out = subprocess.run([".venv/bin/localspec", "generate", "--target", str(T), "--draft", str(D), "--prompt", PROMPT,
                          "--max-tokens", "200", "--json"], capture_output=True, text=True, check=True).stdout
    c = json.loads(out)["stats"]
    cli_rates.append(1000 * c["predicted_n"] / c["predicted_ms"])
    print(f"round {round_+1}: app {app_rates[-1]:.2f} tok/s, generate {cli_rates[-1]:.2f} tok/s", flush=True)
subprocess.run(["tmux", "kill-session", "-t", "ratio"])
a, c = sum(app_rates)/3, sum(cli_rates)/3
print(f"app with the panel open {a:.2f} tok/s, localspec generate {c:.2f} tok/s: ratio {a/c:.3f}")
