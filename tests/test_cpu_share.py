"""Beside programs that keep CPUs busy, a pass takes a thread fewer for each (issue 75, item 3: two spinning threads
decoded at half the speed of one beside a busy core), and takes them all again once the CPUs are free; a thread count
the user set is kept."""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from localspec.engine.llama import cpu_share
from localspec.engine.llama.model import Model, ModelConfig

PATIENCE_S = 60  # a bound on the wait for looks at the machine (SAMPLE_S apart), not a duration under test


@contextmanager
def busy_cpus(n: int):
    """`n` programs that each keep a CPU busy, as a browser or a build would."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def decode_until(model: Model, done) -> bool:
    """Decode one-token passes, as plain decoding does, until `done()` or PATIENCE_S."""
    token, deadline = model.vocab.bos, time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline:
        model.clear_cache()
        model.decode([token], outputs=1)
        if done():
            return True
    return False


@pytest.mark.parametrize("given", [None, 2])
def test_a_pass_takes_a_thread_fewer_for_each_cpu_other_programs_hold(tiny, given):
    if cpu_share.usable_cpus() < 2:
        pytest.skip("one CPU: there is no thread to give up")
    model = Model(tiny["talkative"], ModelConfig(n_threads=given))
    try:
        configured = model.n_threads
        assert configured >= 2 and model.threads_now == configured
        with busy_cpus(cpu_share.usable_cpus() - 1):  # one CPU left to this process
            # the model's passes follow the machine; one keeping the user's count takes no look, so the test looks itself
            seen = (lambda: model.threads_now < configured) if given is None else (lambda: cpu_share.SHARE.threads(configured) < configured)
            assert decode_until(model, seen), f"the hogs were never seen: others at {cpu_share.SHARE.others:.2f} CPUs"
            assert model.threads_now == (given or 1)  # one CPU left: one thread; the user's count is kept, whatever runs beside
        if given is None:
            assert decode_until(model, lambda: model.threads_now == configured), f"others still at {cpu_share.SHARE.others:.2f} CPUs"
    finally:
        model.close()
