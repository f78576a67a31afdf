// chorus serve checked by the real OpenAI Node SDK: every response format streamed, SSE events,
// custom voices, the SDK's typed errors, and PCM bit-equal to `chorus say` for the same seed.
// Needs a built chorus (CHORUS_BIN, default ../../build/chorus); run with `node --test`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI, { toFile } from 'openai';

const here = path.dirname(fileURLToPath(import.meta.url));
const chorus = process.env.CHORUS_BIN ?? path.resolve(here, '../../build/chorus');
const work = mkdtempSync(path.join(tmpdir(), 'chorus-node-'));
const cv = path.join(work, 'tiny_cv');
const base = path.join(work, 'tiny_base');
let server, baseURL, client;

before(async () => {
  execFileSync(chorus, ['make-tiny', '--variant', 'custom_voice', '--out', cv]);
  execFileSync(chorus, ['make-tiny', '--variant', 'base', '--out', base]);
  server = spawn(chorus, ['serve', '--model', cv, '--model', base, '--port', '0', '--voices-dir', path.join(work, 'voices'),
    '--max-segment-chars', '40'], { stdio: ['ignore', 'pipe', 'inherit'] });
  baseURL = await new Promise((resolve, reject) => {
    let out = '';
    server.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    server.on('exit', (code) => reject(new Error(`chorus serve exited with ${code}`)));
  });
  client = new OpenAI({ apiKey: 'unused', baseURL: `${baseURL}/v1`, maxRetries: 0 });
});

after(async () => {
  if (!server) return;
  const code = await new Promise((resolve) => {
    server.removeAllListeners('exit');
    server.on('exit', (c) => resolve(c));
    server.kill('SIGTERM');
  });
  assert.equal(code, 0, 'chorus serve exits 0 after SIGTERM');
});

const request = (extra = {}) => ({ model: 'tiny_cv', voice: 'ryan', input: 'Hello there.', seed: 5, max_new_tokens: 6, ...extra });

async function readStreamed(response) {
  const chunks = [];
  for await (const chunk of response.body) chunks.push(Buffer.from(chunk));
  return { bytes: Buffer.concat(chunks), reads: chunks.length };
}

test('every response format', async () => {
  const magic = {
    mp3: (b) => b[0] === 0xff && (b[1] & 0xe0) === 0xe0,
    opus: (b) => b.subarray(0, 4).toString() === 'OggS' && b.includes('OpusHead'),
    flac: (b) => b.subarray(0, 4).toString() === 'fLaC',
    wav: (b) => b.subarray(0, 4).toString() === 'RIFF' && b.subarray(8, 12).toString() === 'WAVE',
    pcm: (b) => b.length > 0 && b.length % 2 === 0,
  };
  for (const [format, ok] of Object.entries(magic)) {
    const res = await client.audio.speech.create(request({ response_format: format }));
    const { bytes } = await readStreamed(res);
    assert.ok(bytes.length > 0, format);
    assert.ok(ok(bytes), `${format}: unexpected bytes ${bytes.subarray(0, 8).toString('hex')}`);
  }
});

test('PCM equals chorus say for the same seed', async () => {
  const res = await client.audio.speech.create(request({ response_format: 'pcm' }));
  const got = Buffer.from(await res.arrayBuffer());
  const raw = path.join(work, 'say.raw');
  execFileSync(chorus, ['say', '--model', cv, '--text', 'Hello there.', '--speaker', 'ryan', '--seed', '5', '--max-frames', '6',
    '-q', '-o', raw]);
  const want = readFileSync(raw);
  assert.ok(want.length > 0);
  assert.ok(got.equals(want), `server ${got.length} bytes vs say ${want.length} bytes differ`);
  const other = Buffer.from(await (await client.audio.speech.create(request({ response_format: 'pcm', seed: 6 }))).arrayBuffer());
  assert.ok(!other.equals(want), 'another seed gives other audio');
});

test('audio arrives in several chunks', async () => {
  const res = await client.audio.speech.create(request({ response_format: 'pcm', max_new_tokens: 60 }));
  const { bytes, reads } = await readStreamed(res);
  assert.ok(bytes.length > 0);
  assert.ok(reads >= 2, `one piece (${reads} reads)`);
});

test('SSE: audio deltas then done with usage', async () => {
  const res = await client.audio.speech.create(request({ response_format: 'pcm', stream_format: 'sse' }));
  const text = Buffer.from(await res.arrayBuffer()).toString();
  const events = text.split('\n\n').filter((e) => e.length > 0).map((e) => {
    assert.ok(e.startsWith('data: '), e);
    return JSON.parse(e.slice(6));
  });
  const deltas = events.filter((e) => e.type === 'speech.audio.delta');
  assert.ok(deltas.length >= 1);
  assert.equal(events.at(-1).type, 'speech.audio.done');
  assert.ok(events.at(-1).usage.output_tokens > 0);
  const audio = Buffer.concat(deltas.map((d) => Buffer.from(d.audio, 'base64')));
  const plain = Buffer.from(await (await client.audio.speech.create(request({ response_format: 'pcm' }))).arrayBuffer());
  assert.ok(audio.equals(plain), 'SSE audio equals the plain stream');
});

test('errors surface as the SDK error types', async () => {
  await assert.rejects(client.audio.speech.create(request({ voice: 'nobody' })), (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(client.audio.speech.create(request({ model: 'nope' })), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(client.audio.speech.create(request({ speed: 9 })), (e) => e instanceof OpenAI.BadRequestError && e.param === 'speed');
  await assert.rejects(client.audio.speech.create(request({ response_format: 'aac' })),
    (e) => e instanceof OpenAI.BadRequestError && /mp3, opus, flac, wav, pcm/.test(e.message));
  const keyed = new OpenAI({ apiKey: 'x', baseURL: `${baseURL}/v1`, maxRetries: 0 });
  assert.ok(keyed);  // the server here has no key: authentication is covered by the C++ tests
});

test('custom voices: create, list, use, delete', async () => {
  // A 1.5 s 16-bit WAV of two sines.
  const n = 36000, rate = 24000;
  const wav = Buffer.alloc(44 + 2 * n);
  wav.write('RIFF', 0); wav.writeUInt32LE(36 + 2 * n, 4); wav.write('WAVEfmt ', 8); wav.writeUInt32LE(16, 16);
  wav.writeUInt16LE(1, 20); wav.writeUInt16LE(1, 22); wav.writeUInt32LE(rate, 24); wav.writeUInt32LE(rate * 2, 28);
  wav.writeUInt16LE(2, 32); wav.writeUInt16LE(16, 34); wav.write('data', 36); wav.writeUInt32LE(2 * n, 40);
  for (let i = 0; i < n; i++) wav.writeInt16LE(Math.round(8000 * Math.sin(2 * Math.PI * 220 * i / rate) + 3000 * Math.sin(2 * Math.PI * 530 * i / rate)), 44 + 2 * i);
  const voice = await client.audio.voices.create({ name: 'Narrator', consent: 'yes', audio_sample: await toFile(wav, 'ref.wav', { type: 'audio/wav' }) });
  assert.equal(voice.name, 'Narrator');
  assert.match(voice.id, /^voice_[0-9a-f]{16}$/);
  const list = await (await fetch(`${baseURL}/v1/audio/voices`)).json();
  assert.ok(list.data.some((v) => v.id === voice.id));
  const res = await client.audio.speech.create({ model: 'tiny_base', voice: { id: voice.id }, input: 'Hi.', max_new_tokens: 4, response_format: 'pcm' });
  assert.ok(Buffer.from(await res.arrayBuffer()).length > 0);
  const deleted = await client.audio.voices.delete(voice.id);
  assert.equal(deleted.deleted, true);
  await assert.rejects(client.audio.voices.delete(voice.id), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(client.audio.speech.create({ model: 'tiny_base', voice: { id: voice.id }, input: 'Hi.' }), (e) => e instanceof OpenAI.NotFoundError);
});
