#!/usr/bin/env python3
"""Latency of the streaming-text WebSocket (GET /v1/audio/speech/stream) of a running `chorus serve`:
time from the first input.text to the first audio byte, and from input.cancel to the last audio byte.
Standard library only (a minimal RFC 6455 client), so it runs on any machine with Python 3.

  ws_latency.py --url ws://127.0.0.1:8000/v1/audio/speech/stream --model NAME --voice VOICE [--runs 5]

Prints one line per run and the medians; --json FILE writes them.
"""
import argparse
import base64
import json
import os
import socket
import statistics
import struct
import time
import urllib.parse


class Ws:
    def __init__(self, url, timeout=30.0):
        u = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port or 80), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        path = u.path + ("?" + u.query if u.query else "")
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise RuntimeError("connection closed during the handshake")
            head += chunk
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status:
            raise RuntimeError(f"no upgrade: {status!r}")
        self.buf = head.split(b"\r\n\r\n", 1)[1]

    def send_text(self, obj):
        data = json.dumps(obj).encode()
        mask = os.urandom(4)
        n = len(data)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n)
                                if n < 65536 else bytes([0x80 | 127]) + struct.pack(">Q", n))
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self):
        """(opcode, payload) of the next frame (servers do not mask)."""
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._read(8))[0]
        return b0 & 0x0F, self._read(n)


def one_run(url, config, text, cancel_after_s):
    ws = Ws(url)
    ws.send_text(dict(config, type="session.config"))
    t0 = time.monotonic()
    ws.send_text({"type": "input.text", "text": text})
    first = None
    cancel_at = None
    last_audio = None
    audio_bytes = 0
    # input.done goes out at the first audio, or after a second without any: a layout that speaks
    # while the text is written starts before it; one that waits for whole sentences needs it.
    done_sent = False
    ws.sock.settimeout(1.0)
    while True:
        try:
            op, payload = ws.recv()
        except socket.timeout:
            if done_sent:
                raise RuntimeError("no reply from the server")
            ws.send_text({"type": "input.done"})
            done_sent = True
            ws.sock.settimeout(30.0)
            continue
        now = time.monotonic()
        if op == 2:
            audio_bytes += len(payload)
            last_audio = now
            if first is None:
                first = now
                before_done = not done_sent
                if not done_sent:
                    ws.send_text({"type": "input.done"})
                    done_sent = True
                    ws.sock.settimeout(30.0)
            if cancel_after_s is not None and cancel_at is None and now - first >= cancel_after_s:
                ws.send_text({"type": "input.cancel"})
                cancel_at = time.monotonic()
        elif op == 1:
            msg = json.loads(payload)
            if msg.get("type") == "error":
                raise RuntimeError(f"server error: {msg}")
            if msg.get("type") == "audio.done":
                break
        elif op == 8:
            break
    ws.sock.close()
    return {
        "first_audio_ms": (first - t0) * 1e3 if first else None,
        "cancel_to_last_audio_ms": (last_audio - cancel_at) * 1e3 if cancel_at and last_audio and last_audio > cancel_at else 0.0
        if cancel_at else None,
        "audio_bytes": audio_bytes,
        "audio_before_input_done": first is not None and before_done,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--voice", default="")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--model-layout", action="store_true",
                    help="keep the model's default text layout (else non_streaming_mode=false: one text token per frame)")
    a = ap.parse_args()
    config = {"model": a.model, "response_format": "pcm"}
    if a.voice:
        config["voice"] = a.voice
    if not a.model_layout:
        config["non_streaming_mode"] = False
    text = "Hello there, this is a streaming test. It goes on for a while so that it can be cancelled midway."
    first, cancel = [], []
    for i in range(a.runs):
        # Cancelled at its first audio: random-weight checkpoints rarely end a sentence, and under load
        # the rest would take longer than the measurement.
        r1 = one_run(a.url, dict(config, seed=100 + i), "Hello there, this is a streaming test.", 0.0)
        r2 = one_run(a.url, dict(config, seed=200 + i), text, 0.3)
        first.append(r1["first_audio_ms"])
        cancel.append(r2["cancel_to_last_audio_ms"])
        print(f"run {i}: first input.text -> first audio {r1['first_audio_ms']:.1f} ms ({r1['audio_bytes']} bytes, "
              f"{'before' if r1['audio_before_input_done'] else 'after'} input.done); "
              f"input.cancel -> last audio byte {r2['cancel_to_last_audio_ms']:.1f} ms", flush=True)
    res = {"label": a.label, "first_audio_ms_median": statistics.median(first),
           "cancel_to_last_audio_ms_median": statistics.median(cancel), "runs": a.runs}
    print(f"{a.label}: median first audio {res['first_audio_ms_median']:.1f} ms, "
          f"median cancel -> last audio byte {res['cancel_to_last_audio_ms_median']:.1f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f)


if __name__ == "__main__":
    main()
