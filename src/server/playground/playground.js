// The chorus playground: picks a model and voice, sends the text over the WebSocket
// /v1/audio/speech/stream (whole, or word by word as an LLM would write it) and plays the raw PCM
// it gets back as it arrives, with Web Audio. Plain browser JavaScript, nothing fetched from
// elsewhere. window.chorusPlayground exposes the counters the browser test reads.
'use strict';

const $ = (id) => document.getElementById(id);
const state = {
  models: [],
  voices: [],
  ws: null,
  ctx: null,
  sources: new Set(),
  nextTime: 0,
  pcm: [],         // Int16Array chunks received, for the WAV download
  leftover: null,  // an odd byte carried to the next message
  peaks: [],       // [min, max] per 10 ms, for the waveform
  sampleRate: 24000,
  samples: 0,
  bytes: 0,
  chunks: 0,
  played: 0,
  t0: 0,
  tFirstText: 0,
  ttfaMs: null,
  rtf: null,
  done: false,
  speaking: false,
  errors: [],
  recorder: null,
  recorded: null,
};
window.chorusPlayground = state;

const MODE_NAMES = { CustomVoice: 'Preset voice', VoiceDesign: 'Voice design (describe the voice)', Base: 'Cloned voice' };

function apiKey() { return $('api-key').value.trim(); }
function authHeaders() { return apiKey() ? { Authorization: 'Bearer ' + apiKey() } : {}; }

function setStatus(text) { $('status').textContent = text; }
function showError(text) {
  state.errors.push(text);
  const e = $('error');
  e.textContent = text;
  e.hidden = false;
}
function clearError() { $('error').hidden = true; $('error').textContent = ''; }

async function apiError(res) {
  try {
    const j = await res.json();
    if (j && j.error && j.error.message) return `${j.error.message} (HTTP ${res.status})`;
  } catch (_) { /* not JSON */ }
  return `The server answered HTTP ${res.status}.`;
}

async function getJson(path) {
  const res = await fetch(path, { headers: authHeaders() });
  if (!res.ok) throw new Error(await apiError(res));
  return res.json();
}

function option(select, value, label) {
  const o = document.createElement('option');
  o.value = value;
  o.textContent = label ?? value;
  select.appendChild(o);
}

function currentModel() { return state.models.find((m) => m.id === $('model').value); }

async function loadModels() {
  try {
    const j = await getJson('/v1/models');
    state.models = j.data || [];
  } catch (e) {
    showError('Could not list the models: ' + e.message + (apiKey() ? '' : ' If the server needs an API key, enter it below.'));
    return;
  }
  const sel = $('model');
  sel.innerHTML = '';
  for (const m of state.models) option(sel, m.id, `${m.id} (${m.family} ${m.variant})`);
  await loadVoices();
  onModelChange();
}

async function loadVoices() {
  try {
    const j = await getJson('/v1/audio/voices');
    state.voices = j.data || [];
  } catch (e) {
    state.voices = [];
  }
}

function onModelChange() {
  const m = currentModel();
  const mode = $('mode');
  const keep = mode.value;
  mode.innerHTML = '';
  const modes = (m && m.task_types && m.task_types.length) ? m.task_types : ['CustomVoice'];
  for (const t of modes) option(mode, t, MODE_NAMES[t] || t);
  if (modes.includes(keep)) mode.value = keep;
  const lang = $('language');
  lang.innerHTML = '';
  option(lang, 'auto');
  for (const l of (m && m.languages) || []) option(lang, l);
  onModeChange();
}

function onModeChange() {
  const m = currentModel();
  const mode = $('mode').value;
  const voice = $('voice');
  const keep = voice.value;
  voice.innerHTML = '';
  if (mode === 'CustomVoice') {
    for (const v of (m && m.voices) || []) option(voice, v);
  } else if (mode === 'Base') {
    for (const v of state.voices.filter((v) => !m || v.model === m.id)) option(voice, v.id, `${v.name} (${v.id})`);
    if (!voice.options.length) option(voice, '', 'No stored voice yet: create one below');
  }
  if ([...voice.options].some((o) => o.value === keep)) voice.value = keep;
  $('voice-field').hidden = mode === 'VoiceDesign';
  $('new-voice').hidden = mode !== 'Base';
  $('instructions-label').textContent = mode === 'VoiceDesign' ? 'Voice description (who speaks, how)' : 'Instructions (style, emotion; optional)';
}

function numberField(id, body, integer) {
  const v = $(id).value.trim();
  if (v === '') return;
  const x = integer ? parseInt(v, 10) : parseFloat(v);
  if (Number.isFinite(x)) body[id] = x;
}

function sessionConfig() {
  const mode = $('mode').value;
  const body = { type: 'session.config', model: $('model').value, response_format: 'pcm', language: $('language').value };
  const instr = $('instructions').value.trim();
  if (mode === 'VoiceDesign') {
    body.task_type = 'VoiceDesign';
    if (!instr) throw new Error('Voice design needs a description of the voice.');
  } else if (mode === 'Base') {
    if (!$('voice').value) throw new Error('Pick a stored voice, or create one from reference audio first.');
    body.voice = { id: $('voice').value };
  } else {
    if (!$('voice').value) throw new Error('Pick a voice.');
    body.voice = $('voice').value;
  }
  if (instr) body.instructions = instr;
  numberField('seed', body, true);
  numberField('temperature', body, false);
  numberField('top_p', body, false);
  numberField('top_k', body, true);
  numberField('repetition_penalty', body, false);
  numberField('speed', body, false);
  numberField('max_new_tokens', body, true);
  if (body.speed === 1) delete body.speed;
  return body;
}

// --- playback and the waveform

function resetOutput() {
  for (const s of state.sources) { try { s.stop(); } catch (_) { /* already stopped */ } }
  state.sources.clear();
  Object.assign(state, { pcm: [], leftover: null, peaks: [], samples: 0, bytes: 0, chunks: 0, played: 0,
                         ttfaMs: null, rtf: null, done: false, nextTime: 0 });
  for (const id of ['ttfa', 'rtf', 'seconds', 'bytes']) $(id).textContent = '–';
  $('download').disabled = true;
  drawWave();
}

function onAudio(buf) {
  let bytes = new Uint8Array(buf);
  if (state.leftover) {
    const b = new Uint8Array(bytes.length + 1);
    b[0] = state.leftover[0];
    b.set(bytes, 1);
    bytes = b;
    state.leftover = null;
  }
  if (bytes.length % 2) { state.leftover = bytes.slice(-1); bytes = bytes.slice(0, -1); }
  if (!bytes.length) return;
  if (state.ttfaMs === null) {
    state.ttfaMs = performance.now() - state.t0;
    $('ttfa').textContent = `${Math.round(state.ttfaMs)} ms`;
  }
  const pcm = new Int16Array(bytes.buffer, bytes.byteOffset, bytes.length / 2).slice();
  state.pcm.push(pcm);
  state.chunks += 1;
  state.bytes += bytes.length;
  const f = new Float32Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) f[i] = pcm[i] / 32768;
  // Peaks per 10 ms for the waveform.
  const step = Math.max(1, Math.round(state.sampleRate / 100));
  for (let i = 0; i < f.length; i += step) {
    let lo = 1, hi = -1;
    for (let k = i; k < Math.min(f.length, i + step); k++) { lo = Math.min(lo, f[k]); hi = Math.max(hi, f[k]); }
    state.peaks.push([lo, hi]);
  }
  state.samples += f.length;
  play(f);
  $('seconds').textContent = `${(state.samples / state.sampleRate).toFixed(2)} s`;
  $('bytes').textContent = `${(state.bytes / 1024).toFixed(1)} KiB`;
  requestAnimationFrame(drawWave);
}

function play(f) {
  const ctx = state.ctx;
  if (!ctx) return;
  const b = ctx.createBuffer(1, f.length, state.sampleRate);
  b.copyToChannel(f, 0);
  const src = ctx.createBufferSource();
  src.buffer = b;
  src.connect(ctx.destination);
  // Chunks play back to back; a late one starts at once (an underrun is heard as a gap).
  const at = Math.max(ctx.currentTime + 0.02, state.nextTime);
  src.start(at);
  state.nextTime = at + b.duration;
  state.sources.add(src);
  src.onended = () => { state.sources.delete(src); state.played += 1; };
}

function drawWave() {
  const c = $('wave');
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(c.clientWidth * dpr)), h = Math.max(1, Math.round(c.clientHeight * dpr));
  if (c.width !== w) c.width = w;
  if (c.height !== h) c.height = h;
  const g = c.getContext('2d');
  g.clearRect(0, 0, w, h);
  g.fillStyle = getComputedStyle(document.documentElement).getPropertyValue('--accent').trim() || '#0b5cad';
  // The time axis grows with the audio: at least 5 s wide.
  const span = Math.max(state.peaks.length, 500);
  for (let x = 0; x < w; x++) {
    const a = Math.floor(x * span / w), e = Math.floor((x + 1) * span / w);
    if (a >= state.peaks.length) break;
    let lo = 1, hi = -1;
    for (let i = a; i < Math.max(a + 1, e) && i < state.peaks.length; i++) { lo = Math.min(lo, state.peaks[i][0]); hi = Math.max(hi, state.peaks[i][1]); }
    const y0 = (1 - hi) * h / 2, y1 = (1 - lo) * h / 2;
    g.fillRect(x, y0, 1, Math.max(1, y1 - y0));
  }
}

// --- speaking

function wsUrl() {
  const u = new URL('/v1/audio/speech/stream', location.href);
  u.protocol = location.protocol === 'https:' ? 'wss:' : 'ws:';
  if (apiKey()) u.searchParams.set('api_key', apiKey());  // a browser cannot set headers on a WebSocket
  return u.toString();
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function speak(ev) {
  ev.preventDefault();
  clearError();
  const text = $('text').value;
  if (!text.trim()) { showError('Type some text to speak.'); $('text').focus(); return; }
  let config;
  try { config = sessionConfig(); } catch (e) { showError(e.message); return; }
  resetOutput();
  if (!state.ctx) state.ctx = new AudioContext();
  await state.ctx.resume();
  state.t0 = performance.now();
  state.speaking = true;
  $('speak').disabled = true;
  $('stop').disabled = false;
  setStatus('Connecting…');
  const ws = new WebSocket(wsUrl());
  ws.binaryType = 'arraybuffer';
  state.ws = ws;
  ws.onmessage = (m) => {
    if (ws !== state.ws) return;
    if (typeof m.data !== 'string') return onAudio(m.data);
    let j;
    try { j = JSON.parse(m.data); } catch (_) { return; }
    if (j.type === 'audio.start') {
      state.sampleRate = j.sample_rate || 24000;
      setStatus('Speaking…');
    } else if (j.type === 'audio.done') {
      if (j.cancelled) return;
      const seconds = state.samples / state.sampleRate;
      const took = (performance.now() - state.tFirstText) / 1000;
      if (seconds > 0) {
        state.rtf = took / seconds;
        $('rtf').textContent = `${state.rtf.toFixed(2)} (${(1 / state.rtf).toFixed(1)}× real time)`;
      }
    } else if (j.type === 'session.done') {
      state.done = true;
      finish('Done: ' + (state.samples / state.sampleRate).toFixed(2) + ' s of audio.');
      ws.send(JSON.stringify({ type: 'session.close' }));
    } else if (j.type === 'error') {
      showError('The server refused: ' + (j.message || (j.error && j.error.message) || 'unknown error') +
                (j.error && j.error.param ? ` (field: ${j.error.param})` : ''));
      finish('Stopped by an error.');
      ws.close();
    }
  };
  ws.onerror = () => { if (ws === state.ws && state.speaking) showError('The WebSocket connection failed (is the server running, and is the API key right?).'); };
  ws.onclose = () => { if (ws === state.ws && state.speaking) finish('The connection closed.'); };
  // Typing as an LLM: Qwen3-TTS takes one text token per frame (the streaming text layout), so it
  // starts speaking after the first words instead of waiting for whole sentences.
  if ($('llm').checked) config.non_streaming_mode = false;
  ws.onopen = async () => {
    ws.send(JSON.stringify(config));
    state.tFirstText = performance.now();
    if ($('llm').checked) {
      // Word by word, at an LLM's pace, while the audio of the first words already plays.
      const words = text.match(/\S+\s*/g) || [];
      for (const w of words) {
        if (ws !== state.ws || ws.readyState !== WebSocket.OPEN || !state.speaking) return;
        ws.send(JSON.stringify({ type: 'input.text', text: w }));
        await sleep(60 + Math.random() * 80);
      }
    } else {
      ws.send(JSON.stringify({ type: 'input.text', text }));
    }
    if (ws === state.ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: 'input.done' }));
  };
}

function finish(status) {
  state.speaking = false;
  setStatus(status);
  $('speak').disabled = false;
  $('stop').disabled = true;
  $('download').disabled = state.samples === 0;
}

function stop() {
  const ws = state.ws;
  if (ws && ws.readyState === WebSocket.OPEN) {
    ws.send(JSON.stringify({ type: 'input.cancel' }));
    ws.send(JSON.stringify({ type: 'session.close' }));
  }
  for (const s of state.sources) { try { s.stop(); } catch (_) { /* not started */ } }
  state.sources.clear();
  finish('Stopped.');
  $('speak').focus();
}

// --- WAV

function wavBlob(chunks, rate) {
  const n = chunks.reduce((a, c) => a + c.length, 0);
  const buf = new ArrayBuffer(44 + 2 * n);
  const v = new DataView(buf);
  const str = (o, s) => { for (let i = 0; i < s.length; i++) v.setUint8(o + i, s.charCodeAt(i)); };
  str(0, 'RIFF'); v.setUint32(4, 36 + 2 * n, true); str(8, 'WAVE');
  str(12, 'fmt '); v.setUint32(16, 16, true); v.setUint16(20, 1, true); v.setUint16(22, 1, true);
  v.setUint32(24, rate, true); v.setUint32(28, rate * 2, true); v.setUint16(32, 2, true); v.setUint16(34, 16, true);
  str(36, 'data'); v.setUint32(40, 2 * n, true);
  let o = 44;
  for (const c of chunks) for (let i = 0; i < c.length; i++, o += 2) v.setInt16(o, c[i], true);
  return new Blob([buf], { type: 'audio/wav' });
}

function download() {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(wavBlob(state.pcm, state.sampleRate));
  a.download = 'chorus.wav';
  document.body.appendChild(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

// --- new voices

async function toggleRecord() {
  const btn = $('nv-record');
  if (state.recorder) { state.recorder.stop(); return; }
  if (!navigator.mediaDevices || !window.MediaRecorder) {
    showError('This browser cannot record here (recording needs https or localhost). Upload a file instead.');
    return;
  }
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (e) {
    showError('The microphone is not available: ' + e.message);
    return;
  }
  const rec = new MediaRecorder(stream);
  const parts = [];
  rec.ondataavailable = (e) => parts.push(e.data);
  rec.onstop = async () => {
    stream.getTracks().forEach((t) => t.stop());
    state.recorder = null;
    btn.textContent = 'Record from microphone';
    btn.setAttribute('aria-pressed', 'false');
    try {
      // The recording (webm/ogg) becomes a 16-bit WAV here, a format the server reads.
      const ctx = state.ctx || (state.ctx = new AudioContext());
      const audio = await ctx.decodeAudioData(await new Blob(parts).arrayBuffer());
      const mono = audio.getChannelData(0);
      const pcm = new Int16Array(mono.length);
      for (let i = 0; i < mono.length; i++) pcm[i] = Math.max(-32768, Math.min(32767, Math.round(mono[i] * 32767)));
      state.recorded = wavBlob([pcm], audio.sampleRate);
      $('nv-record-state').textContent = `Recorded ${audio.duration.toFixed(1)} s.`;
    } catch (e) {
      showError('Could not read the recording: ' + e.message);
    }
  };
  rec.start();
  state.recorder = rec;
  btn.textContent = 'Stop recording';
  btn.setAttribute('aria-pressed', 'true');
  $('nv-record-state').textContent = 'Recording…';
}

async function createVoice() {
  clearError();
  const name = $('nv-name').value.trim();
  const file = $('nv-file').files[0];
  const audio = file || state.recorded;
  if (!name) { showError('Give the new voice a name.'); $('nv-name').focus(); return; }
  if (!audio) { showError('Choose an audio file or record one.'); $('nv-file').focus(); return; }
  if (!$('nv-consent').checked) { showError('Confirm that the speaker agreed to this use of their voice.'); $('nv-consent').focus(); return; }
  const form = new FormData();
  form.append('name', name);
  form.append('audio_sample', audio, file ? file.name : 'recording.wav');
  const refText = $('nv-text').value.trim();
  if (refText) form.append('ref_text', refText);
  form.append('consent', 'confirmed in the playground');
  form.append('model', $('model').value);
  setStatus('Creating the voice…');
  const res = await fetch('/v1/audio/voices', { method: 'POST', body: form, headers: authHeaders() });
  if (!res.ok) { showError('The voice was not created: ' + (await apiError(res))); setStatus('Idle.'); return; }
  const v = await res.json();
  await loadVoices();
  $('mode').value = 'Base';
  onModeChange();
  $('voice').value = v.id;
  setStatus(`Voice "${v.name}" created (${v.id}) and selected.`);
}

// --- wiring

$('api-key').value = localStorage.getItem('chorus-api-key') || '';
$('api-key').addEventListener('change', () => { localStorage.setItem('chorus-api-key', apiKey()); clearError(); loadModels(); });
$('model').addEventListener('change', onModelChange);
$('mode').addEventListener('change', onModeChange);
$('form').addEventListener('submit', speak);
$('stop').addEventListener('click', stop);
$('download').addEventListener('click', download);
$('nv-record').addEventListener('click', toggleRecord);
$('nv-create').addEventListener('click', () => createVoice().catch((e) => showError(e.message)));
window.addEventListener('resize', () => requestAnimationFrame(drawWave));
document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && state.speaking) stop(); });
loadModels();
