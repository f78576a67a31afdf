#!/usr/bin/env python3
"""Builds the inputs of the tokenizer benchmark under work/:

  work/tokenizer/tokenizer.json  the Qwen3-TTS tokenizer as one tokenizer.json, built from the
                                 reference vocab.json + merges.txt + tokenizer_config.json + the
                                 assumed Qwen3-TTS added tokens, in the layout that
                                 shared/reference/qwen2_tokenizer/README.md describes
  work/corpus.jsonl              >= 20 MB of multilingual text, one {"text": ...} per line

Corpus: every golden string (many languages, emoji, edge cases), the translations in the gettext
catalogs under /usr/share/locale (dozens of languages and scripts), English prose from the vim
and project docs, and the Qwen3-TTS prompt template around golden strings. Paragraphs are shuffled
with a fixed seed and packed into lines of about 4 KB.
"""
import gettext
import glob
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.normpath(os.path.join(HERE, "../../../shared/reference/qwen2_tokenizer"))
WORK = os.path.join(HERE, "work")
TARGET_BYTES = int(os.environ.get("CORPUS_MB", "24")) << 20
REGEX = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"


def build_tokenizer_json():
    config = json.load(open(os.path.join(REF, "tokenizer_config.json"), encoding="utf-8"))
    added = []
    for id_, t in config["added_tokens_decoder"].items():
        added.append(dict(id=int(id_), **t))
    for t in json.load(open(os.path.join(REF, "qwen3_tts_added_tokens.assumed.json"), encoding="utf-8"))["tokens"]:
        added.append(dict(id=t["id"], content=t["content"], single_word=False, lstrip=False, rstrip=False,
                          normalized=False, special=t["special"]))
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    merges = [l for l in open(os.path.join(REF, "merges.txt"), encoding="utf-8").read().split("\n") if l]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": REGEX}, "behavior": "Isolated", "invert": False}, byte_level]},
        "post_processor": byte_level, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": json.load(open(os.path.join(REF, "vocab.json"), encoding="utf-8")), "merges": merges},
    }
    os.makedirs(os.path.join(WORK, "tokenizer"), exist_ok=True)
    with open(os.path.join(WORK, "tokenizer", "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


def paragraphs():
    golden = [json.loads(l)["text"] for l in open(os.path.join(REF, "golden.jsonl"), encoding="utf-8")]
    parts = {"golden": [], "gettext": [], "docs": []}
    parts["golden"] = golden + ["<|im_start|>assistant\n" + g + "<|im_end|>\n<|im_start|>assistant\n" for g in golden]
    for mo in sorted(glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo")):
        try:
            with open(mo, "rb") as f:
                catalog = gettext.GNUTranslations(f)
        except Exception:
            continue
        for value in catalog._catalog.values():
            if isinstance(value, str) and len(value) > 3:
                parts["gettext"].append(value)
    for path in sorted(glob.glob("/usr/share/vim/vim*/doc/*.txt") + glob.glob(os.path.join(REF, "../../docs/**/*.md"), recursive=True)):
        try:
            text = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        parts["docs"].extend(p for p in text.split("\n\n") if p.strip())
    return parts


def build_corpus():
    parts = paragraphs()
    rng = random.Random(20240601)
    # Golden strings several times over, then everything else, shuffled.
    pool = parts["golden"] * 8 + parts["gettext"] + parts["docs"]
    rng.shuffle(pool)
    lines, line, size = [], [], 0
    total = 0
    i = 0
    while total < TARGET_BYTES:
        p = pool[i % len(pool)]
        i += 1
        line.append(p)
        size += len(p.encode("utf-8"))
        if size >= 4096:
            text = "\n\n".join(line)
            lines.append(text)
            total += len(text.encode("utf-8"))
            line, size = [], 0
    with open(os.path.join(WORK, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for text in lines:
            f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
    counts = {k: sum(len(p.encode("utf-8")) for p in v) for k, v in parts.items()}
    non_ascii = sum(1 for t in lines for c in t if ord(c) > 127)
    chars = sum(len(t) for t in lines)
    print(f"corpus: {len(lines)} lines, {total / 2**20:.1f} MiB of text, {100 * non_ascii / chars:.1f}% non-ASCII "
          f"characters; sources (MiB): " + ", ".join(f"{k} {v / 2**20:.1f}" for k, v in counts.items()))


if __name__ == "__main__":
    os.makedirs(WORK, exist_ok=True)
    build_tokenizer_json()
    build_corpus()
