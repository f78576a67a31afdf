"""Fixtures: make-tiny checkpoints (random weights, real tokenizer) written once per session, and
the `chorus` CLI to compare against.

The package under test is the one staged by the CMake build (build/python, or
$CHORUS_BUILD_DIR/python), unless CHORUS_TEST_INSTALLED=1 (then the installed one).
"""
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("CHORUS_BUILD_DIR", os.path.join(ROOT, "build"))
if os.environ.get("CHORUS_TEST_INSTALLED") != "1":
    sys.path.insert(0, os.path.join(BUILD, "python"))

CHORUS_BIN = os.environ.get("CHORUS_BIN", os.path.join(BUILD, "chorus"))


def run_cli(*args):
    return subprocess.run([CHORUS_BIN, *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    dirs = {}
    for variant in ("custom_voice", "voice_design", "base"):
        d = root / variant
        run_cli("make-tiny", "--variant", variant, "--out", str(d))
        dirs[variant] = str(d)
    return dirs


@pytest.fixture(scope="session")
def chorus_mod():
    import chorus
    return chorus


@pytest.fixture(scope="session")
def cv_model(chorus_mod, tiny_dirs):
    return chorus_mod.load(tiny_dirs["custom_voice"], threads=2)


@pytest.fixture(scope="session")
def base_model(chorus_mod, tiny_dirs):
    return chorus_mod.load(tiny_dirs["base"], threads=2)


@pytest.fixture(scope="session")
def vd_model(chorus_mod, tiny_dirs):
    return chorus_mod.load(tiny_dirs["voice_design"], threads=2)


def cli_say(tmp_path, model_dir, *args):
    """`chorus say ... -o X.raw --sample-format float`, read back as float32."""
    out = tmp_path / f"cli_{abs(hash(args))}.raw"
    run_cli("say", "--model", model_dir, "-q", "--threads", "2", "-o", str(out), "--sample-format", "float", *args)
    return np.fromfile(str(out), dtype="<f4")


def tone(seconds=1.5, sr=16000, f=190.0):
    t = np.arange(int(seconds * sr), dtype=np.float64) / sr
    return (0.3 * np.sin(2 * np.pi * f * t) + 0.05 * np.sin(2 * np.pi * 3.3 * f * t)).astype(np.float32)


def assert_bit_equal(a, b):
    """Same length and the same float32 bits in every sample."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    assert a.shape == b.shape, f"lengths differ: {a.shape} vs {b.shape}"
    assert a.size > 0, "no samples"
    diff = np.flatnonzero(a.view(np.uint32) != b.view(np.uint32))
    assert diff.size == 0, f"{diff.size} samples differ, first at {diff[0]}: {a[diff[0]]!r} vs {b[diff[0]]!r}"
