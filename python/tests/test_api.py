"""chorus.load / Model.say / stream / astream / create_voice against the `chorus say` CLI (the same
seed must give the same float samples, bit for bit), across threads, and with bad input."""
import asyncio
import threading

import numpy as np
import pytest

from conftest import assert_bit_equal, cli_say, tone

TEXT = "Hello there, this is a test."


def test_info(cv_model, tiny_dirs):
    i = cv_model.info
    assert (i.family, i.variant) == ("qwen3-tts", "custom_voice")
    assert i.sample_rate == 24000 and cv_model.sample_rate == 24000
    assert i.frame_rate == 12.5 and i.codebooks == 16
    assert i.device == "cpu" and i.has_codec and not i.clones_voices
    assert i.dir == tiny_dirs["custom_voice"]
    # The preset voices are the checkpoint's speaker table (config.json), sorted; a say() with the
    # first one works.
    import json, os
    with open(os.path.join(tiny_dirs["custom_voice"], "config.json")) as f:
        table = json.load(f)["talker_config"]["spk_id"]
    assert len(i.speakers) > 0 and list(i.speakers) == sorted(k.lower() for k in table)
    assert "auto" not in i.languages and len(i.languages) > 0
    audio, _ = cv_model.say(TEXT, voice=i.speakers[0], seed=1, max_frames=3)
    assert audio.size > 0


@pytest.mark.parametrize("py_kwargs,cli_args", [
    (dict(seed=5), ["--seed", "5"]),
    (dict(seed=11, temperature=0.7, top_k=20, subtalker_top_p=0.8), ["--seed", "11", "--temperature", "0.7",
                                                                      "--top-k", "20", "--subtalker-top-p", "0.8"]),
    (dict(greedy=True), ["--greedy"]),
    (dict(seed=2, text_layout="streaming", repetition_penalty=1.3), ["--seed", "2", "--streaming-text",
                                                                      "--repetition-penalty", "1.3"]),
])
def test_say_equals_cli(cv_model, tiny_dirs, tmp_path, py_kwargs, cli_args):
    audio, sr = cv_model.say(TEXT, voice="ryan", language="english", max_frames=8, min_frames=8, **py_kwargs)
    assert sr == 24000 and audio.dtype == np.float32 and audio.ndim == 1
    ref = cli_say(tmp_path, tiny_dirs["custom_voice"], "--text", TEXT, "--speaker", "ryan", "--language", "english",
                  "--max-frames", "8", "--min-frames", "8", *cli_args)
    assert_bit_equal(audio, ref)


def test_other_seed_differs(cv_model, tiny_dirs, tmp_path):
    # Guards the comparison above: the CLI's output does depend on the seed.
    audio, _ = cv_model.say(TEXT, voice="ryan", seed=5, max_frames=8, min_frames=8)
    ref = cli_say(tmp_path, tiny_dirs["custom_voice"], "--text", TEXT, "--speaker", "ryan", "--seed", "6",
                  "--max-frames", "8", "--min-frames", "8")
    assert audio.shape == ref.shape and not np.array_equal(audio, ref)


def test_planted_bug_one_ulp_is_caught():
    # The equality helper must see a one-ulp change in one sample.
    a = tone(0.1)
    b = a.copy()
    b[17] = np.nextafter(b[17], np.float32(2.0))
    with pytest.raises(AssertionError):
        assert_bit_equal(a, b)


def test_stream_chunks_concatenate_to_say(cv_model):
    full, _ = cv_model.say(TEXT, voice="ryan", seed=9, max_frames=12, min_frames=12)
    s = cv_model.stream(TEXT, voice="ryan", seed=9, max_frames=12, min_frames=12)
    chunks = list(s)
    assert len(chunks) > 1, "a 12-frame request should arrive in several chunks"
    assert all(c.dtype == np.float32 and c.ndim == 1 for c in chunks)
    assert_bit_equal(np.concatenate(chunks), full)
    assert s.stats["stop"] == "max-frames" and s.stats["frames"] == 12
    assert s.codes().shape == (12, 16)


def test_closing_the_stream_cancels(cv_model):
    with cv_model.stream(TEXT, voice="ryan", max_frames=400, min_frames=400) as s:
        first = next(s)
        assert first.size > 0
    assert s.stats is None or s.stats["stop"] == "cancelled"
    s2 = cv_model.stream(TEXT, voice="ryan", max_frames=400, min_frames=400)
    next(s2)
    s2.cancel()
    rest = list(s2)  # ends without raising
    assert s2.stats["stop"] == "cancelled" and s2.stats["frames"] < 400
    assert len(rest) < 400


def test_astream(cv_model):
    full, _ = cv_model.say(TEXT, voice="ryan", seed=4, max_frames=6, min_frames=6)

    async def collect():
        out = []
        async with cv_model.astream(TEXT, voice="ryan", seed=4, max_frames=6, min_frames=6) as s:
            async for c in s:
                out.append(c)
        return out

    assert_bit_equal(np.concatenate(asyncio.run(collect())), full)


def test_eight_threads_at_once(cv_model):
    seeds = list(range(100, 108))
    solo = {s: cv_model.say(TEXT, voice="ryan", seed=s, max_frames=10, min_frames=10)[0] for s in seeds}
    results, errors = {}, []
    start = threading.Barrier(len(seeds))

    def work(seed):
        try:
            start.wait()
            results[seed] = cv_model.say(TEXT, voice="ryan", seed=seed, max_frames=10, min_frames=10)[0]
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for s in seeds:
        assert_bit_equal(results[s], solo[s])
    assert not np.array_equal(solo[100], solo[101])


def test_bad_arguments(chorus_mod, cv_model, tiny_dirs):
    with pytest.raises(ValueError, match="nobody"):
        cv_model.say(TEXT, voice="nobody")
    with pytest.raises(ValueError, match="klingon"):
        cv_model.say(TEXT, voice="ryan", language="klingon")
    with pytest.raises(ValueError, match="top_p"):
        cv_model.say(TEXT, voice="ryan", top_p=2.0)
    with pytest.raises(ValueError, match="temperature"):
        cv_model.say(TEXT, voice="ryan", temperature=-1)
    with pytest.raises(ValueError, match="seed"):
        cv_model.say(TEXT, voice="ryan", seed=-3)
    with pytest.raises(ValueError, match="text_layout"):
        cv_model.say(TEXT, voice="ryan", text_layout="sideways")
    with pytest.raises(ValueError, match="text"):
        cv_model.say("", voice="ryan")
    with pytest.raises(ValueError, match="max_frames"):
        cv_model.stream(TEXT, voice="ryan", max_frames=0)
    with pytest.raises(TypeError, match="colour"):
        cv_model.say(TEXT, voice="ryan", colour="blue")
    with pytest.raises(TypeError):
        cv_model.say(123, voice="ryan")
    with pytest.raises(FileNotFoundError, match="no/such/model"):
        chorus_mod.load("/no/such/model")
    with pytest.raises(ValueError, match="tpu"):
        chorus_mod.load(tiny_dirs["custom_voice"], device="tpu")
    with pytest.raises(ValueError, match="int3"):
        chorus_mod.load(tiny_dirs["custom_voice"], weights="int3")
    with pytest.raises(RuntimeError, match="clone"):
        cv_model.create_voice(tone(), 16000)
    with pytest.raises(FileNotFoundError):
        chorus_mod.Voice.load("/no/such.voice")
    # Still serving after all that.
    audio, _ = cv_model.say(TEXT, voice="ryan", max_frames=3, min_frames=3)
    assert audio.size == 3 * 1920


def test_voice_create_save_load(chorus_mod, base_model, tiny_dirs, tmp_path):
    v = base_model.create_voice(tone(), 16000, ref_text="A short reference.")
    assert v.ref_text == "A short reference."
    assert v.x_vector.dtype == np.float32 and v.x_vector.size > 0
    assert v.ref_codes is not None and v.ref_codes.shape[1] == 16
    path = tmp_path / "me.voice"
    v.save(str(path))
    v2 = chorus_mod.Voice.load(str(path))
    np.testing.assert_array_equal(v2.x_vector, v.x_vector)
    np.testing.assert_array_equal(v2.ref_codes, v.ref_codes)
    a, _ = base_model.say("Cloned speech.", voice=v, seed=3, max_frames=6, min_frames=6)
    b, _ = base_model.say("Cloned speech.", voice=v2, seed=3, max_frames=6, min_frames=6)
    assert_bit_equal(a, b)
    ref = cli_say(tmp_path, tiny_dirs["base"], "--text", "Cloned speech.", "--voice", str(path), "--seed", "3",
                  "--max-frames", "6", "--min-frames", "6")
    assert_bit_equal(a, ref)
    # Without a transcript: the speaker embedding alone, as `--xvector-only`.
    x = base_model.create_voice(tone(), 16000)
    assert x.ref_codes is None
    wav = tmp_path / "ref.wav"
    import wave
    with wave.open(str(wav), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes((np.clip(tone(), -1, 1) * 32767).astype("<i2").tobytes())
    from_file = base_model.create_voice(str(wav))
    from_bytes = base_model.create_voice(wav.read_bytes())
    np.testing.assert_array_equal(from_file.x_vector, from_bytes.x_vector)
    a, _ = base_model.say("Cloned speech.", voice=from_file, seed=3, max_frames=5, min_frames=5)
    ref = cli_say(tmp_path, tiny_dirs["base"], "--text", "Cloned speech.", "--ref-audio", str(wav), "--xvector-only",
                  "--seed", "3", "--max-frames", "5", "--min-frames", "5")
    assert_bit_equal(a, ref)


def test_close_from_another_thread(cv_model):
    # A consumer blocked in the iteration sees the request end when another thread closes it.
    s = cv_model.stream(TEXT * 20, voice="ryan", max_frames=2000, min_frames=2000)
    first = next(s)
    assert first.size > 0
    closer = threading.Timer(0.2, s.close)
    closer.start()
    n = sum(1 for _ in s)
    closer.join()
    assert s.stats["stop"] == "cancelled" and n + 1 <= s.stats["frames"] < 2000
