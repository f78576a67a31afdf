"""Models by Hugging Face id: `chorus pull` and `chorus.load(..., download=True)` against a mock
Hub on loopback (mock_hub.py): the huggingface_hub cache layout, only the needed files, resume
after a cut connection, a gated repository, a wrong checksum, HF_HUB_OFFLINE."""
import hashlib
import os
import subprocess

import numpy as np
import pytest

from conftest import CHORUS_BIN, assert_bit_equal
from mock_hub import Hub, Repo

COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "89abcdef0123456789abcdef0123456789abcdef"


@pytest.fixture()
def hub(tiny_dirs):
    h = Hub()
    extra = {"README.md": b"# a model card\n", "extra/weights_fp32.bin": b"\0" * 1000, "speech_tokenizer/README.md": b"x"}
    h.add("Test/Tiny", Repo(tiny_dirs["custom_voice"], COMMIT, extra_files=extra))
    h.add("Test/Gated", Repo(tiny_dirs["custom_voice"], OTHER, gated_token="good-token"))
    h.add("Test/Corrupt", Repo(tiny_dirs["custom_voice"], OTHER, corrupt={"model.safetensors"}))
    yield h
    h.close()


def pull(hub, cache, *args, env_extra=None):
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(cache))
    env.pop("HF_TOKEN", None)
    env.pop("HF_HUB_OFFLINE", None)
    env.update(env_extra or {})
    return subprocess.run([CHORUS_BIN, "pull", *args], capture_output=True, text=True, env=env)


def test_pull_layout_resume_and_reuse(hub, tiny_dirs, tmp_path, chorus_mod, monkeypatch):
    src = tiny_dirs["custom_voice"]
    weights = open(os.path.join(src, "model.safetensors"), "rb").read()
    hub.cut_once.add(hashlib.sha256(weights).hexdigest())
    cache = tmp_path / "hub"
    r = pull(hub, cache, "Test/Tiny")
    assert r.returncode == 0, r.stderr
    repo = cache / "models--Test--Tiny"
    snap = repo / "snapshots" / COMMIT
    assert r.stdout.strip() == str(snap)
    assert (repo / "refs" / "main").read_text().strip() == COMMIT
    # Every file of the model, as relative symlinks into blobs/ named by ETag (sha256 for LFS files).
    wanted = []
    for root, _, names in os.walk(src):
        for n in names:
            wanted.append(os.path.relpath(os.path.join(root, n), src))
    assert wanted
    for rel in wanted:
        link = snap / rel
        assert link.is_symlink(), rel
        target = os.readlink(link)
        assert not os.path.isabs(target) and "blobs/" in target
        assert link.read_bytes() == open(os.path.join(src, rel), "rb").read(), rel
    sha = hashlib.sha256(weights).hexdigest()
    assert (repo / "blobs" / sha).is_file()
    # What a model does not need stays on the Hub.
    assert not (snap / "README.md").exists() and not (snap / "extra").exists()
    assert not (snap / "speech_tokenizer" / "README.md").exists()
    assert not list(repo.glob("blobs/*.incomplete"))
    assert (cache / ".locks" / "models--Test--Tiny").is_dir()  # huggingface_hub's lock folder
    # The cut transfer was resumed with a Range request, not restarted.
    ranges = [rg for m, p, rg in hub.requests(f"/cdn/{sha}") if m == "GET"]
    assert ranges[0] is None and len(ranges) >= 2 and ranges[-1] and ranges[-1].startswith("bytes=")

    # A second pull downloads nothing.
    before = len(hub.requests("/cdn/"))
    r = pull(hub, cache, "Test/Tiny")
    assert r.returncode == 0, r.stderr
    assert len(hub.requests("/cdn/")) == before

    # The cached id loads like the folder, and speaks the same.
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    by_id = chorus_mod.load("Test/Tiny", threads=2)
    by_dir = chorus_mod.load(src, threads=2)
    a, _ = by_id.say("Hello.", voice="ryan", seed=1, max_frames=4, min_frames=4)
    b, _ = by_dir.say("Hello.", voice="ryan", seed=1, max_frames=4, min_frames=4)
    assert_bit_equal(a, b)


def test_gated_needs_a_token(hub, tmp_path):
    cache = tmp_path / "hub"
    r = pull(hub, cache, "Test/Gated")
    assert r.returncode != 0 and "401" in r.stderr and "HF_TOKEN" in r.stderr
    assert not (cache / "models--Test--Gated" / "snapshots").exists()
    r = pull(hub, cache, "Test/Gated", env_extra={"HF_TOKEN": "good-token"})
    assert r.returncode == 0, r.stderr
    assert (cache / "models--Test--Gated" / "snapshots" / OTHER / "config.json").is_file()


def test_wrong_checksum_leaves_nothing_half_written(hub, tmp_path):
    cache = tmp_path / "hub"
    r = pull(hub, cache, "Test/Corrupt")
    assert r.returncode != 0 and "checksum mismatch" in r.stderr, r.stderr
    repo = cache / "models--Test--Corrupt"
    assert not (repo / "snapshots" / OTHER / "model.safetensors").exists()
    assert not list(repo.glob("blobs/*.incomplete"))
    assert not (repo / "blobs" / ("0" * 64)).exists()
    assert not (repo / "refs" / "main").exists()


def test_unknown_revision_and_offline(hub, tmp_path, chorus_mod, monkeypatch):
    cache = tmp_path / "hub"
    r = pull(hub, cache, "Test/Tiny@nope")
    assert r.returncode != 0 and "404" in r.stderr
    r = pull(hub, cache, "Test/Tiny", env_extra={"HF_HUB_OFFLINE": "1"})
    assert r.returncode != 0 and "HF_HUB_OFFLINE" in r.stderr
    assert not (cache / "models--Test--Tiny").exists()
    # Python: without download=True nothing is fetched; with it the id loads.
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(FileNotFoundError, match="chorus pull"):
        chorus_mod.load("Test/Tiny")
    m = chorus_mod.load("Test/Tiny@" + COMMIT, download=True, threads=2)
    assert m.info.variant == "custom_voice"
    audio, _ = m.say("Hi.", voice="ryan", max_frames=2, min_frames=2)
    assert audio.size == 2 * 1920 and np.isfinite(audio).all()


def test_say_downloads_only_when_asked(hub, tmp_path):
    cache = tmp_path / "hub"
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(cache))
    env.pop("HF_HUB_OFFLINE", None)
    out = tmp_path / "out.raw"
    args = [CHORUS_BIN, "say", "--model", "Test/Tiny", "--text", "Hi.", "--speaker", "ryan", "--max-frames", "2",
            "--min-frames", "2", "-q", "-o", str(out), "--sample-format", "float"]
    r = subprocess.run(args, capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "chorus pull" in r.stderr
    assert not hub.requests("/api/")
    r = subprocess.run(args + ["--download"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size == 2 * 1920 * 4
    assert (cache / "models--Test--Tiny" / "refs" / "main").read_text() == COMMIT


def test_serve_downloads_only_when_asked(hub, tmp_path):
    import json
    import re
    import signal
    import urllib.request
    cache = tmp_path / "hub"
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HUB_CACHE=str(cache))
    env.pop("HF_HUB_OFFLINE", None)
    args = [CHORUS_BIN, "serve", "--model", "Test/Tiny", "--port", "0", "--host", "127.0.0.1"]
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode != 0 and "chorus pull" in r.stderr
    assert not hub.requests("/api/")
    p = subprocess.Popen(args + ["--download"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        url = None
        for line in p.stdout:
            m = re.search(r"listening on (http://\S+)", line)
            if m:
                url = m.group(1)
                break
        assert url, "the server did not start"
        models = json.load(urllib.request.urlopen(url + "/v1/models", timeout=10))
        assert [m["id"] for m in models["data"]] == ["Tiny"]
        assert (cache / "models--Test--Tiny" / "refs" / "main").read_text() == COMMIT
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
