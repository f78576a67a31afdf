"""A drop-in for the official wrapper's ``qwen_tts.Qwen3TTSModel``: change the import and keep the script.

    from chorus.compat import Qwen3TTSModel
    model = Qwen3TTSModel.from_pretrained("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", device_map="cuda:0")
    wavs, sr = model.generate_custom_voice(text="Hello.", speaker="Ryan", language="English")

Same method names, argument names and defaults, and the same ``(wavs, sample_rate)`` result (a list
of float32 arrays). A batch (lists of texts) runs as concurrent requests, batched by the engine.
What is honoured and what is not is listed in docs/python.md: in short, every generation argument
of the official wrapper is, except that sampling follows chorus's seeded generator (``seed=``, an
addition, default 0) rather than torch's global one; unknown ``**kwargs`` (other Hugging Face
``generate()`` options) are ignored with a warning.
"""
from __future__ import annotations

import base64
import json
import os
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from . import Model, Voice, load

AudioLike = Union[str, np.ndarray, Tuple[np.ndarray, int]]

# The official wrapper's generation kwargs, and what each becomes in a chorus request.
_GEN_KWARGS = ("do_sample", "top_k", "top_p", "temperature", "repetition_penalty", "subtalker_dosample",
               "subtalker_top_k", "subtalker_top_p", "subtalker_temperature", "max_new_tokens")


@dataclass
class VoiceClonePromptItem:
    """One reference voice, as ``create_voice_clone_prompt`` returns it (numpy arrays instead of
    torch tensors). ``voice`` is the chorus voice behind it."""
    ref_code: Optional[np.ndarray]  # [frames, codebooks] int32, None in x-vector-only mode
    ref_spk_embedding: np.ndarray   # [dim] float32
    x_vector_only_mode: bool
    icl_mode: bool
    ref_text: Optional[str] = None
    voice: Optional[Voice] = None


def _as_list(x: Any) -> List[Any]:
    return x if isinstance(x, list) else [x]


# The official wrapper's values for arguments neither the caller nor generate_config.json sets.
_HARD_DEFAULTS = dict(do_sample=True, top_k=50, top_p=1.0, temperature=0.9, repetition_penalty=1.05,
                      subtalker_dosample=True, subtalker_top_k=50, subtalker_top_p=1.0, subtalker_temperature=0.9,
                      max_new_tokens=2048)


def _sampler(kwargs: Dict[str, Any], defaults: Dict[str, Any]) -> Dict[str, Any]:
    """The official generation kwargs → chorus request arguments, merged as the official wrapper
    merges them (the caller's value, else generate_config.json's, else the wrapper's fallback), and
    all passed explicitly, since in chorus the code predictor's values otherwise follow codebook 0's."""
    out: Dict[str, Any] = {"seed": kwargs.pop("seed", 0)}
    ignored = sorted(k for k in kwargs if k not in _GEN_KWARGS)
    if ignored:
        warnings.warn(f"chorus.compat: ignoring unsupported generate() arguments: {', '.join(ignored)}", stacklevel=3)

    def pick(name: str) -> Any:
        if kwargs.get(name) is not None:
            return kwargs[name]
        return defaults.get(name, _HARD_DEFAULTS[name])

    out["greedy"] = not pick("do_sample")
    out["subtalker_greedy"] = not pick("subtalker_dosample")
    for name in ("top_k", "top_p", "temperature", "repetition_penalty", "subtalker_top_k", "subtalker_top_p",
                 "subtalker_temperature"):
        out[name] = pick(name)
    # The official loop stops after max_new_tokens codebook-0 tokens, the last one without a frame.
    n = int(pick("max_new_tokens"))
    if n < 2:
        raise ValueError("max_new_tokens must be >= 2")
    out["max_frames"] = n - 1
    return out


def _generate_defaults(model_dir: str) -> Dict[str, Any]:
    path = os.path.join(model_dir, "generation_config.json")
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError):
        return {}
    return {k: cfg[k] for k in _HARD_DEFAULTS if k in cfg} if isinstance(cfg, dict) else {}


class Qwen3TTSModel:
    """chorus behind the official ``Qwen3TTSModel`` interface."""

    def __init__(self, model: Model):
        self.chorus_model = model
        self.model = model  # the official wrapper exposes its model here too
        self.device = model.info.device
        self.generate_defaults = _generate_defaults(model.info.dir)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str, **kwargs: Any) -> "Qwen3TTSModel":
        """Loads a folder or a Hugging Face id (local cache). Of the Hugging Face kwargs,
        ``device_map`` ("cpu", "cuda", "cuda:N"; "auto" means "cuda" when this build has CUDA) is
        honoured; ``dtype``/``torch_dtype`` and ``attn_implementation`` are accepted and ignored
        (chorus computes as the official bf16 checkpoint does). ``weights`` (a chorus addition:
        "bf16", "int8", "int4" or "fp8", as in ``chorus.load``) picks the weight format."""
        device = kwargs.pop("device_map", None) or kwargs.pop("device", None) or "cpu"
        device = str(device)
        if device == "auto":
            from . import build_info
            device = "cuda" if "cuda" in build_info().lower() else "cpu"
        for k in ("dtype", "torch_dtype", "attn_implementation", "low_cpu_mem_usage", "trust_remote_code"):
            kwargs.pop(k, None)
        threads = int(kwargs.pop("threads", 0))
        weights = str(kwargs.pop("weights", "bf16"))
        if kwargs:
            warnings.warn(f"chorus.compat: ignoring from_pretrained arguments: {', '.join(sorted(kwargs))}", stacklevel=2)
        return cls(load(pretrained_model_name_or_path, device=device, weights=weights, threads=threads))

    # -- helpers -----------------------------------------------------------------------------

    def _check_type(self, want: str, method: str) -> None:
        info = self.chorus_model.info
        if info.variant != want:
            raise ValueError(f"model {info.dir} is a {info.family} {info.variant} checkpoint and does not support "
                             f"{method} (it needs a {want} checkpoint)")

    def _run(self, requests: List[Dict[str, Any]]) -> Tuple[List[np.ndarray], int]:
        """Starts every request before reading any, so the engine batches them."""
        streams = [self.chorus_model.stream(**r) for r in requests]
        wavs = []
        try:
            for s in streams:
                chunks = list(s)
                wavs.append(np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32))
        finally:
            for s in streams:
                s.close()
        return wavs, self.chorus_model.sample_rate

    @staticmethod
    def _broadcast(name: str, values: List[Any], n: int) -> List[Any]:
        if len(values) == 1 and n > 1:
            return values * n
        if len(values) != n:
            raise ValueError(f"Batch size mismatch: text={n}, {name}={len(values)}")
        return values

    def _languages(self, language: Any, n: int) -> List[str]:
        langs = _as_list(language) if isinstance(language, list) else [language if language is not None else "Auto"]
        return [str(x).lower() if x is not None else "auto" for x in self._broadcast("language", langs, n)]

    # -- the official API ----------------------------------------------------------------------

    def create_voice_clone_prompt(self, ref_audio: Union[AudioLike, List[AudioLike]],
                                  ref_text: Optional[Union[str, List[Optional[str]]]] = None,
                                  x_vector_only_mode: Union[bool, List[bool]] = False) -> List[VoiceClonePromptItem]:
        self._check_type("base", "create_voice_clone_prompt")
        audios = _as_list(ref_audio)
        texts = _as_list(ref_text) if isinstance(ref_text, list) else [ref_text] * len(audios)
        xvecs = _as_list(x_vector_only_mode) if isinstance(x_vector_only_mode, list) else [x_vector_only_mode] * len(audios)
        if len(texts) != len(audios) or len(xvecs) != len(audios):
            raise ValueError(f"Batch size mismatch: ref_audio={len(audios)}, ref_text={len(texts)}, "
                             f"x_vector_only_mode={len(xvecs)}")
        items = []
        for i, (a, t, xo) in enumerate(zip(audios, texts, xvecs)):
            if not xo and not t:
                raise ValueError(f"ref_text is required when x_vector_only_mode=False (ICL mode). Bad index={i}")
            voice = self._voice_from(a, None if xo else t)
            codes = voice.ref_codes
            items.append(VoiceClonePromptItem(ref_code=None if xo else codes, ref_spk_embedding=voice.x_vector,
                                              x_vector_only_mode=bool(xo), icl_mode=not xo, ref_text=t, voice=voice))
        return items

    def _voice_from(self, a: AudioLike, text: Optional[str]) -> Voice:
        m = self.chorus_model
        if isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], np.ndarray):
            return m.create_voice(a[0], int(a[1]), ref_text=text)
        if isinstance(a, np.ndarray):
            raise ValueError("For numpy waveform input, pass a tuple (audio, sr).")
        if isinstance(a, str):
            if a.startswith(("http://", "https://")):
                raise ValueError("chorus does not fetch reference audio from URLs: download it and pass the file")
            if a.startswith("data:"):
                return m.create_voice(base64.b64decode(a.split(",", 1)[-1]), ref_text=text)
            if len(a) > 256 and not os.path.exists(a):  # base64 audio (its alphabet includes '/')
                try:
                    data = base64.b64decode(a, validate=True)
                except ValueError:
                    raise ValueError("ref_audio: neither an existing file nor base64 audio") from None
                return m.create_voice(data, ref_text=text)
            return m.create_voice(a, ref_text=text)
        raise TypeError(f"Unsupported audio input type: {type(a)}")

    def generate_voice_clone(self, text: Union[str, List[str]], language: Union[str, List[str]] = None,
                             ref_audio: Optional[Union[AudioLike, List[AudioLike]]] = None,
                             ref_text: Optional[Union[str, List[Optional[str]]]] = None,
                             x_vector_only_mode: Union[bool, List[bool]] = False,
                             voice_clone_prompt: Optional[Union[Dict[str, Any], List[VoiceClonePromptItem]]] = None,
                             non_streaming_mode: bool = False, **kwargs: Any) -> Tuple[List[np.ndarray], int]:
        self._check_type("base", "generate_voice_clone")
        texts = _as_list(text)
        langs = self._languages(language, len(texts))
        if voice_clone_prompt is None:
            if ref_audio is None:
                raise ValueError("Either `voice_clone_prompt` or `ref_audio` must be provided.")
            items = self.create_voice_clone_prompt(ref_audio, ref_text, x_vector_only_mode)
        elif isinstance(voice_clone_prompt, list):
            items = voice_clone_prompt
        else:
            raise ValueError("chorus.compat takes voice_clone_prompt as the list create_voice_clone_prompt returns")
        items = self._broadcast("prompt", items, len(texts))
        sampler = _sampler(dict(kwargs), self.generate_defaults)
        layout = "full" if non_streaming_mode else "streaming"
        reqs = [dict(text=t, voice=it.voice, language=lang, xvector_only=it.x_vector_only_mode,
                     text_layout=layout, **sampler) for t, lang, it in zip(texts, langs, items)]
        return self._run(reqs)

    def generate_voice_design(self, text: Union[str, List[str]], instruct: Union[str, List[str]],
                              language: Union[str, List[str]] = None, non_streaming_mode: bool = True,
                              **kwargs: Any) -> Tuple[List[np.ndarray], int]:
        self._check_type("voice_design", "generate_voice_design")
        texts = _as_list(text)
        langs = self._languages(language, len(texts))
        instructs = self._broadcast("instruct", _as_list(instruct), len(texts))
        sampler = _sampler(dict(kwargs), self.generate_defaults)
        layout = "full" if non_streaming_mode else "streaming"
        reqs = [dict(text=t, instructions=ins or None, language=lang, text_layout=layout, **sampler)
                for t, ins, lang in zip(texts, instructs, langs)]
        return self._run(reqs)

    def generate_custom_voice(self, text: Union[str, List[str]], speaker: Union[str, List[str]],
                              language: Union[str, List[str]] = None,
                              instruct: Optional[Union[str, List[str]]] = None, non_streaming_mode: bool = True,
                              **kwargs: Any) -> Tuple[List[np.ndarray], int]:
        self._check_type("custom_voice", "generate_custom_voice")
        texts = _as_list(text)
        langs = self._languages(language, len(texts))
        speakers = self._broadcast("speaker", _as_list(speaker), len(texts))
        instructs = self._broadcast("instruct", _as_list(instruct) if instruct is not None else [None], len(texts))
        sampler = _sampler(dict(kwargs), self.generate_defaults)
        layout = "full" if non_streaming_mode else "streaming"
        reqs = [dict(text=t, voice=str(spk).lower() if spk else None, instructions=ins or None, language=lang,
                     text_layout=layout, **sampler) for t, spk, ins, lang in zip(texts, speakers, instructs, langs)]
        return self._run(reqs)

    def get_supported_speakers(self) -> Optional[List[str]]:
        return None  # chorus checks the speaker against the checkpoint and names the valid ones

    def get_supported_languages(self) -> Optional[List[str]]:
        return None
