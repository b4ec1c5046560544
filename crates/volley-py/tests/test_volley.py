"""volley's Python face, end to end: each scenario of scenarios.py runs under `volley run` on 2
or 4 ranks (real processes, real shared memory), and every rank must report its checks held.
VOLLEY_BIN names the volley binary (default: target/release/volley of this repository)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
VOLLEY = os.environ.get("VOLLEY_BIN", str(HERE.parents[2] / "target" / "release" / "volley"))


def run(n, name, *extra):
    p = subprocess.run(
        [VOLLEY, "run", "-n", str(n), *extra, sys.executable, str(HERE / "scenarios.py"), name],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return p


@pytest.mark.parametrize("n", [2])
@pytest.mark.parametrize("name", ["numpy_pingpong", "zero_copy", "asyncio_reader"])
def test_two_ranks(name, n):
    p = run(n, name)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count(f"result: {name} rank=") == n, p.stdout + p.stderr


@pytest.mark.parametrize("n", [2, 4])
def test_active_port(n):
    p = run(n, "active_port")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("result: active_port rank=") == n, p.stdout + p.stderr


def test_callback_exception_is_raised_by_the_next_call():
    p = run(2, "callback_error")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("result: callback_error rank=") == 2, p.stdout + p.stderr
    # And it was reported where it happened.
    assert "bad message" in p.stderr, p.stderr


def test_a_dead_peer_raises_peer_lost():
    p = run(2, "dead_peer", "--keep-going")
    assert "result: dead_peer rank=0 ok" in p.stdout, p.stdout + p.stderr
    assert p.returncode != 0  # rank 1 was killed
