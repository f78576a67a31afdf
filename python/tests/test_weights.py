"""weights= ("bf16" | "int8" | "int4"): chorus.load quantises the decoder layers at load and says
so, the quantised model speaks (finite audio of the asked length) and stays close to bf16 without
being it, bad names and CUDA are refused, and `chorus serve --weights` serves what it names."""
import json
import subprocess
import urllib.request

import numpy as np
import pytest

from conftest import CHORUS_BIN

TEXTS = ["Hello there, this is a test.", "A second, different sentence.", "Numbers: one, two, three.",
         "The quick brown fox jumps over the lazy dog.", "Is this the right way to the station?",
         "Good morning, how are you?", "Please speak slowly and clearly.", "It rained all day yesterday."]


@pytest.fixture(scope="module")
def int8_model(chorus_mod, tiny_dirs):
    return chorus_mod.load(tiny_dirs["custom_voice"], weights="int8", threads=2)


def first_frames(model, n_frames=2):
    """Greedy codes of the first frames of every text, int32 [texts, frames, codebooks]."""
    out = []
    for t in TEXTS:
        with model.stream(t, voice="ryan", language="english", greedy=True, max_frames=n_frames,
                          min_frames=n_frames) as s:
            for _ in s:
                pass
            out.append(s.codes())
    return np.stack(out)


def test_info_says_which_weights(cv_model, int8_model):
    assert cv_model.info.weights == "bf16"
    assert int8_model.info.weights == "int8"


def test_int8_speaks_close_to_bf16_but_not_as_bf16(cv_model, int8_model):
    audio, sr = int8_model.say(TEXTS[0], voice="ryan", language="english", seed=3, max_frames=8, min_frames=8)
    ref, _ = cv_model.say(TEXTS[0], voice="ryan", language="english", seed=3, max_frames=8, min_frames=8)
    assert sr == 24000 and audio.size == ref.size == 8 * 1920
    assert np.all(np.isfinite(audio)) and float(np.abs(audio).max()) > 0
    assert not np.array_equal(audio, ref), "int8 gave the bf16 model's samples: the weights were not quantised"
    # Greedy decisions of the first frame, each made on the same prompt by both models: per-group
    # int8 weights change the logits by well under a percent, so nearly every decision agrees
    # (a wrong scale or group makes them noise: about 1 in 2048 agree).
    q, b = first_frames(int8_model), first_frames(cv_model)
    assert q.shape == b.shape == (len(TEXTS), 2, 16)
    agree0 = float(np.mean(q[:, 0, 0] == b[:, 0, 0]))
    agree_all = float(np.mean(q[:, 0, :] == b[:, 0, :]))
    assert agree0 >= 0.75, f"codebook 0 of frame 0 agrees on {agree0:.2f} of the texts"
    assert agree_all >= 0.6, f"frame 0 agrees on {agree_all:.2f} of its codes"


def test_int4_loads_and_differs_more_than_int8(chorus_mod, tiny_dirs, cv_model, int8_model):
    m4 = chorus_mod.load(tiny_dirs["custom_voice"], weights="int4", threads=2)
    assert m4.info.weights == "int4"
    b = first_frames(cv_model, 1)
    q4, q8 = first_frames(m4, 1), first_frames(int8_model, 1)
    assert float(np.mean(q4 == b)) <= float(np.mean(q8 == b))


def test_bad_weights_are_refused(chorus_mod, tiny_dirs):
    with pytest.raises(ValueError, match="int3"):
        chorus_mod.load(tiny_dirs["custom_voice"], weights="int3")
    with pytest.raises(RuntimeError):  # CUDA runs bf16 only (and CPU-only builds have no CUDA)
        chorus_mod.load(tiny_dirs["custom_voice"], device="cuda", weights="int8")


def test_compat_from_pretrained_passes_weights(tiny_dirs):
    from chorus.compat import Qwen3TTSModel
    m = Qwen3TTSModel.from_pretrained(tiny_dirs["custom_voice"], device_map="cpu", weights="int4")
    assert m.chorus_model.info.weights == "int4"


def test_serve_weights(tiny_dirs):
    bad = subprocess.run([CHORUS_BIN, "serve", "--model", tiny_dirs["custom_voice"], "--weights", "int3", "--port", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "int3" in bad.stderr
    server = subprocess.Popen([CHORUS_BIN, "serve", "--model", tiny_dirs["custom_voice"], "--weights", "int8",
                               "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        assert "listening on http://" in line, line
        url = line.split("listening on ")[1].strip()
        with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
            models = json.load(r)["data"]
        assert [m["weights"] for m in models] == ["int8"]
        body = json.dumps({"model": models[0]["id"], "input": "Hello there.", "voice": "ryan", "seed": 5,
                           "max_new_tokens": 4, "response_format": "pcm"}).encode()
        req = urllib.request.Request(url + "/v1/audio/speech", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            pcm = r.read()
        assert len(pcm) > 0 and len(pcm) % 2 == 0
    finally:
        server.terminate()
        assert server.wait(timeout=60) == 0
