"""chorus: fast, exact text-to-speech for Qwen3-TTS and Breeze TTS 2.

    import chorus
    m = chorus.load("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", device="cuda")
    audio, sr = m.say("Hello there.", voice="ryan", language="english", seed=1)

    for chunk in m.stream("A longer text ...", voice="ryan"):   # chunks as they are made
        play(chunk)

    v = m.create_voice(samples, 16000, ref_text="What the reference says.")   # Base models
    v.save("me.voice"); v = chorus.Voice.load("me.voice")

Audio is float32 mono at ``m.sample_rate`` (24 kHz), full scale 1.0. Synthesis releases the GIL:
requests from several Python threads run at once and are batched by the engine. Errors raise
ValueError (bad input), FileNotFoundError (missing model or file) or RuntimeError, with the engine's
message.
"""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any, AsyncIterator, Iterator, Optional, Tuple, Union

import numpy as np

from . import _chorus

__all__ = ["load", "Model", "ModelInfo", "Voice", "Stream", "AsyncStream", "build_info", "API_VERSION"]

API_VERSION: int = _chorus.API_VERSION
Voice = _chorus.Voice


def build_info() -> str:
    """One line: chorus's version, compiled backends and CPU features."""
    return _chorus.build_info()


@dataclass(frozen=True)
class ModelInfo:
    family: str        # "qwen3-tts" or "breeze-tts"
    variant: str       # "custom_voice", "voice_design", "base", ...
    dir: str           # the checkpoint folder
    device: str        # "cpu", "cuda:0"
    codebooks: int
    frame_rate: float  # frames per second of audio (12.5)
    sample_rate: int   # of the audio (24000)
    clones_voices: bool
    has_codec: bool
    weights: str       # "bf16", "int8", "int4" or "fp8", as loaded
    speakers: Tuple[str, ...] = ()   # preset voices (CustomVoice), for say(voice=...)
    languages: Tuple[str, ...] = ()  # accepted language names besides "auto"


# Keyword arguments say(), stream() and astream() accept besides text/voice/instructions/language/seed.
_SAMPLER_ARGS = ("greedy", "temperature", "top_k", "top_p", "repetition_penalty", "subtalker_greedy",
                 "subtalker_temperature", "subtalker_top_k", "subtalker_top_p", "max_frames", "min_frames",
                 "cfg_scale", "text_layout", "xvector_only", "ref_text", "rng_stream")


class Stream:
    """Audio chunks (float32 arrays) of one request, as they are made.

    Iterate it; ``close()`` (or leaving a ``with`` block, or dropping it) cancels the request.
    ``stats`` holds the request's statistics once it has ended, ``codes()`` its codec frames.
    """

    def __init__(self, native: Any):
        self._s = native

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> np.ndarray:
        chunk = self._s.next()
        if chunk is None:
            raise StopIteration
        return chunk

    def cancel(self) -> None:
        """Stops the request before its next frame; iteration then ends."""
        self._s.cancel()

    def close(self) -> None:
        """Cancels the request if it still runs and releases it."""
        self._s.close()

    def codes(self) -> np.ndarray:
        """The codec frames made so far, int32 [frames, codebooks]."""
        return self._s.codes()

    @property
    def stats(self) -> Optional[dict]:
        return self._s.stats

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncStream:
    """``async for chunk in m.astream(...)``: the chunks of one request without blocking the event
    loop (each wait runs in the loop's default executor). ``aclose()`` cancels."""

    def __init__(self, native: Any):
        self._s = native

    def __aiter__(self) -> "AsyncStream":
        return self

    async def __anext__(self) -> np.ndarray:
        loop = asyncio.get_running_loop()
        chunk = await loop.run_in_executor(None, self._s.next)
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def aclose(self) -> None:
        self._s.cancel()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, self._s.close)

    def codes(self) -> np.ndarray:
        return self._s.codes()

    @property
    def stats(self) -> Optional[dict]:
        return self._s.stats

    async def __aenter__(self) -> "AsyncStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class Model:
    """A loaded model. Thread-safe: share one between threads (their requests are batched)."""

    def __init__(self, native: Any):
        self._m = native
        self.info = ModelInfo(**native.info)

    @property
    def sample_rate(self) -> int:
        return self.info.sample_rate

    def __repr__(self) -> str:
        i = self.info
        return f"chorus.Model({i.family} {i.variant}, {i.dir!r}, device={i.device!r})"

    def _request(self, text: str, voice: Union[str, Voice, None], instructions: Optional[str],
                 language: Optional[str], seed: Optional[int], kwargs: dict, codes_only: bool = False) -> Any:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        unknown = sorted(set(kwargs) - set(_SAMPLER_ARGS))
        if unknown:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)} (accepted: {', '.join(_SAMPLER_ARGS)})")
        speaker = None
        clone = None
        if isinstance(voice, str):
            speaker = voice
        elif isinstance(voice, Voice):
            clone = voice
        elif voice is not None:
            raise TypeError(f"voice must be a preset speaker name (str) or a chorus.Voice, not {type(voice).__name__}")
        return _chorus.Request(text, instructions=instructions, speaker=speaker, language=language, voice=clone,
                               seed=seed, codes_only=codes_only, **kwargs)

    def say(self, text: str, voice: Union[str, Voice, None] = None, instructions: Optional[str] = None,
            language: Optional[str] = "auto", seed: int = 0, **sampler: Any) -> Tuple[np.ndarray, int]:
        """Synthesizes ``text``; returns ``(audio, sample_rate)``, audio a float32 mono array.

        voice: a preset speaker name (CustomVoice models) or a :class:`Voice` (voice cloning).
        instructions: a style instruction (1.7B CustomVoice) or the voice description (VoiceDesign).
        language: "auto" or a language the model lists ("english", "chinese", ...).
        seed: the same seed gives the same audio (bit for bit, as ``chorus say --seed``).
        sampler: greedy, temperature, top_k, top_p, repetition_penalty, subtalker_greedy,
            subtalker_temperature, subtalker_top_k, subtalker_top_p (the code predictor; by default it
            follows the codebook-0 values), max_frames, min_frames, cfg_scale (Breeze TTS 2),
            text_layout ("default", "streaming", "full"), xvector_only, ref_text, rng_stream.
            Unset values take the checkpoint's generation_config.json.
        """
        req = self._request(text, voice, instructions, language, seed, sampler)
        audio, _ = self._m.synthesize(req)
        return audio, self.sample_rate

    def stream(self, text: str, voice: Union[str, Voice, None] = None, instructions: Optional[str] = None,
               language: Optional[str] = "auto", seed: int = 0, **sampler: Any) -> Stream:
        """As :meth:`say`, but returns at once with a :class:`Stream` of float32 chunks as they are
        made. Bad arguments raise here; closing the stream cancels the request."""
        return Stream(self._m.start(self._request(text, voice, instructions, language, seed, sampler)))

    def astream(self, text: str, voice: Union[str, Voice, None] = None, instructions: Optional[str] = None,
                language: Optional[str] = "auto", seed: int = 0, **sampler: Any) -> AsyncStream:
        """As :meth:`stream`, for ``async for``."""
        return AsyncStream(self._m.start(self._request(text, voice, instructions, language, seed, sampler)))

    def create_voice(self, audio: Union[np.ndarray, str, os.PathLike, bytes], sample_rate: Optional[int] = None,
                     ref_text: Optional[str] = None) -> Voice:
        """A reusable cloned voice (Qwen3-TTS Base, Breeze TTS 2) from reference audio: a mono
        array with its ``sample_rate``, an audio file's path, or a whole file's bytes.

        ``ref_text``, the transcript, enables in-context cloning (the reference's codes are kept);
        without it the voice clones from the speaker embedding alone.
        """
        if isinstance(audio, (str, os.PathLike)):
            return self._m.voice_from_file(os.fspath(audio), ref_text)
        if isinstance(audio, (bytes, bytearray, memoryview)):
            return self._m.voice_from_bytes(bytes(audio), ref_text)
        if sample_rate is None:
            raise ValueError("a sample array needs its sample_rate")
        arr = np.asarray(audio, dtype=np.float32)
        if arr.ndim == 2:  # (samples, channels), as soundfile returns it
            arr = arr.mean(axis=1, dtype=np.float32)
        return self._m.voice_from_samples(np.ascontiguousarray(arr), int(sample_rate), ref_text)


def load(model: Union[str, os.PathLike], device: str = "cpu", weights: str = "bf16", threads: int = 0,
         download: bool = False) -> Model:
    """Loads a checkpoint: a folder, or a Hugging Face id ("Org/Name[@revision]") in the local
    Hugging Face cache ($HF_HUB_CACHE or $HF_HOME/hub). With ``download=True`` an id missing from the
    cache is fetched into it first (HF_ENDPOINT, HF_TOKEN honoured; HF_HUB_OFFLINE=1 forbids it).

    device: "cpu", "cuda" or "cuda:N".
    weights: "bf16" (the checkpoint's own weights, exact), or "int8" / "int4" (CPU only) / "fp8"
    (CUDA only): the decoder layers quantised at load (weight-only, groups of 32 with f16 scales;
    docs/quantization.md).
    threads: CPU worker threads (0: CHORUS_THREADS or every core).
    """
    return Model(_chorus.load(os.fspath(model), device=device, weights=weights, threads=threads, download=download))
