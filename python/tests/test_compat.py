"""chorus.compat.Qwen3TTSModel, the drop-in for the official wrapper, on each mode: its output must
be what the same request gives through `chorus say` (argument by argument, with the official
defaults: non_streaming_mode True for custom voice and voice design, False for voice clone)."""
import base64
import io
import json
import os
import wave

import numpy as np
import pytest

from conftest import assert_bit_equal, cli_say, tone

TEXT = "Good morning, how are you?"

# The official wrapper's fallbacks (docs/models/qwen3_tts.md §1.6), for keys generation_config.json lacks.
FALLBACK = dict(do_sample=True, top_k=50, top_p=1.0, temperature=0.9, repetition_penalty=1.05,
                subtalker_dosample=True, subtalker_top_k=50, subtalker_top_p=1.0, subtalker_temperature=0.9)


def official_sampler_args(model_dir, **given):
    """`chorus say` flags for what the official wrapper would use: the caller's values, else the
    checkpoint's generation_config.json, else the fallbacks, codebook 0 and code predictor apart."""
    with open(os.path.join(model_dir, "generation_config.json")) as f:
        cfg = json.load(f)
    v = {k: given.get(k, cfg.get(k, d)) for k, d in FALLBACK.items()}
    if not (v["do_sample"] and v["subtalker_dosample"]):
        pytest.skip("the CLI has no flag for greedy on one side only")
    return ["--temperature", repr(float(v["temperature"])), "--top-k", str(v["top_k"]), "--top-p",
            repr(float(v["top_p"])), "--repetition-penalty", repr(float(v["repetition_penalty"])),
            "--subtalker-temperature", repr(float(v["subtalker_temperature"])), "--subtalker-top-k",
            str(v["subtalker_top_k"]), "--subtalker-top-p", repr(float(v["subtalker_top_p"]))]


@pytest.fixture(scope="module")
def compat(tiny_dirs):
    from chorus.compat import Qwen3TTSModel
    return {k: Qwen3TTSModel.from_pretrained(d, device_map="cpu", dtype="bfloat16") for k, d in tiny_dirs.items()}


def test_custom_voice(compat, tiny_dirs, tmp_path):
    wavs, sr = compat["custom_voice"].generate_custom_voice(text=TEXT, speaker="Ryan", language="English",
                                                            max_new_tokens=9, do_sample=True, top_k=30)
    assert sr == 24000 and isinstance(wavs, list) and len(wavs) == 1
    ref = cli_say(tmp_path, tiny_dirs["custom_voice"], "--text", TEXT, "--speaker", "ryan", "--language", "english",
                  "--full-text", "--max-frames", "8", "--seed", "0",
                  *official_sampler_args(tiny_dirs["custom_voice"], top_k=30))
    assert_bit_equal(wavs[0], ref)


def test_custom_voice_batch_and_greedy(compat):
    m = compat["custom_voice"]
    texts = [TEXT, "A second, different sentence."]
    wavs, _ = m.generate_custom_voice(text=texts, speaker="ryan", max_new_tokens=7, do_sample=False,
                                      subtalker_dosample=False)
    assert len(wavs) == 2
    for t, w in zip(texts, wavs):
        single, _ = m.generate_custom_voice(text=t, speaker="ryan", max_new_tokens=7, do_sample=False,
                                            subtalker_dosample=False)
        assert_bit_equal(w, single[0])


def test_voice_design(compat, tiny_dirs, tmp_path):
    wavs, sr = compat["voice_design"].generate_voice_design(text=TEXT, instruct="A calm, low voice.",
                                                            language="English", max_new_tokens=7, temperature=0.8)
    ref = cli_say(tmp_path, tiny_dirs["voice_design"], "--text", TEXT, "--instruct", "A calm, low voice.",
                  "--language", "english", "--full-text", "--max-frames", "6",
                  *official_sampler_args(tiny_dirs["voice_design"], temperature=0.8))
    assert_bit_equal(wavs[0], ref)


def _wav_bytes(x, sr):
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def test_voice_clone(compat, base_model, tmp_path, tiny_dirs):
    m = compat["base"]
    ref_audio = tone()
    wavs, _ = m.generate_voice_clone(text=TEXT, language="English", ref_audio=(ref_audio, 16000),
                                     ref_text="A short reference.", max_new_tokens=7)
    # The same through the native API: an in-context clone with streaming text (the clone default).
    v = base_model.create_voice(ref_audio, 16000, ref_text="A short reference.")
    sampler = dict(greedy=False, subtalker_greedy=False, temperature=0.9, top_k=50, top_p=1.0,
                   repetition_penalty=1.05, subtalker_temperature=0.9, subtalker_top_k=50, subtalker_top_p=1.0)
    with open(os.path.join(tiny_dirs["base"], "generation_config.json")) as f:
        cfg = json.load(f)
    sampler.update({k: cfg[k] for k in sampler if k in cfg})
    native, _ = base_model.say(TEXT, voice=v, language="english", text_layout="streaming", max_frames=6, **sampler)
    assert_bit_equal(wavs[0], native)
    # ... and through the CLI with the voice saved to a file.
    path = tmp_path / "clone.voice"
    v.save(str(path))
    ref = cli_say(tmp_path, tiny_dirs["base"], "--text", TEXT, "--voice", str(path), "--language", "english",
                  "--streaming-text", "--max-frames", "6", *official_sampler_args(tiny_dirs["base"]))
    assert_bit_equal(wavs[0], ref)

    # A prompt made once and reused gives the same; x-vector-only mode differs from ICL.
    items = m.create_voice_clone_prompt(ref_audio=(ref_audio, 16000), ref_text="A short reference.")
    assert items[0].icl_mode and items[0].ref_code.shape[1] == 16 and items[0].ref_spk_embedding.ndim == 1
    again, _ = m.generate_voice_clone(text=TEXT, language="English", voice_clone_prompt=items, max_new_tokens=7)
    assert_bit_equal(again[0], wavs[0])
    xo, _ = m.generate_voice_clone(text=TEXT, language="English", ref_audio=(ref_audio, 16000),
                                   x_vector_only_mode=True, max_new_tokens=7)
    xv = base_model.create_voice(ref_audio, 16000)
    native_xo, _ = base_model.say(TEXT, voice=xv, language="english", text_layout="streaming", max_frames=6,
                                  xvector_only=True, **sampler)
    assert_bit_equal(xo[0], native_xo)
    # Base64 audio, as the official wrapper accepts it.
    b64 = base64.b64encode(_wav_bytes(ref_audio, 16000)).decode()
    wb, _ = m.generate_voice_clone(text=TEXT, ref_audio=b64, x_vector_only_mode=True, max_new_tokens=4)
    assert wb[0].size > 0


def test_compat_errors(compat):
    with pytest.raises(ValueError, match="ref_text is required"):
        compat["base"].generate_voice_clone(text=TEXT, ref_audio=(tone(), 16000))
    with pytest.raises(ValueError, match="tuple"):
        compat["base"].generate_voice_clone(text=TEXT, ref_audio=tone(), x_vector_only_mode=True)
    with pytest.raises(ValueError, match="Either"):
        compat["base"].generate_voice_clone(text=TEXT)
    with pytest.raises(ValueError, match="generate_custom_voice"):
        compat["base"].generate_custom_voice(text=TEXT, speaker="ryan")
    with pytest.raises(ValueError, match="generate_voice_design"):
        compat["custom_voice"].generate_voice_design(text=TEXT, instruct="calm")
    with pytest.raises(ValueError, match="Batch size mismatch"):
        compat["custom_voice"].generate_custom_voice(text=[TEXT, TEXT, TEXT], speaker=["ryan", "aiden"])
    with pytest.warns(UserWarning, match="num_beams"):
        compat["custom_voice"].generate_custom_voice(text=TEXT, speaker="ryan", max_new_tokens=3, num_beams=2)
