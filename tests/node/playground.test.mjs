// The playground page (GET /) in a real browser: Debian's Chromium, headless, driven by
// puppeteer-core, against `chorus serve` on tiny models. Speak streams and plays audio (bytes
// received, time to first audio shown, buffers played to their end), Stop cancels mid-stream, a WAV
// uploaded on the page (and a recording from the fake microphone) becomes a stored voice that then
// speaks, errors show in words, no console errors; screenshots at
// desktop and phone width go to <build>/playground-screenshots.
// Needs a built chorus (CHORUS_BIN, default ../../build/chorus) and chromium (CHROMIUM_BIN, default
// /usr/bin/chromium); run with `node --test`.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import puppeteer from 'puppeteer-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const chorus = process.env.CHORUS_BIN ?? path.resolve(here, '../../build/chorus');
const chromium = process.env.CHROMIUM_BIN ?? '/usr/bin/chromium';
const shots = path.join(path.dirname(chorus), 'playground-screenshots');
const work = mkdtempSync(path.join(tmpdir(), 'chorus-playground-'));
let server, baseURL, browser, page;
const consoleErrors = [];

// A mono 16-bit WAV of two sines, written here.
function sineWav(seconds, rate = 24000) {
  const n = Math.round(seconds * rate);
  const b = Buffer.alloc(44 + 2 * n);
  b.write('RIFF', 0); b.writeUInt32LE(36 + 2 * n, 4); b.write('WAVE', 8);
  b.write('fmt ', 12); b.writeUInt32LE(16, 16); b.writeUInt16LE(1, 20); b.writeUInt16LE(1, 22);
  b.writeUInt32LE(rate, 24); b.writeUInt32LE(rate * 2, 28); b.writeUInt16LE(2, 32); b.writeUInt16LE(16, 34);
  b.write('data', 36); b.writeUInt32LE(2 * n, 40);
  for (let i = 0; i < n; i++) {
    const t = i / rate;
    b.writeInt16LE(Math.round(8000 * Math.sin(2 * Math.PI * 220 * t) + 3000 * Math.sin(2 * Math.PI * 530 * t)), 44 + 2 * i);
  }
  return b;
}

before(async () => {
  const cv = path.join(work, 'tiny_cv'), base = path.join(work, 'tiny_base');
  execFileSync(chorus, ['make-tiny', '--variant', 'custom_voice', '--out', cv]);
  execFileSync(chorus, ['make-tiny', '--variant', 'base', '--out', base]);
  server = spawn(chorus, ['serve', '--model', cv, '--model', base, '--port', '0', '--voices-dir', path.join(work, 'voices')],
    { stdio: ['ignore', 'pipe', 'inherit'] });
  baseURL = await new Promise((resolve, reject) => {
    let out = '';
    server.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    server.on('exit', (code) => reject(new Error(`chorus serve exited with ${code}`)));
  });
  mkdirSync(shots, { recursive: true });
  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    // CI runs as root; audio must start without a gesture the test cannot make in the page's eyes.
    // The fake capture device (a beep) stands in for a microphone, allowed without a prompt.
    args: ['--no-sandbox', '--autoplay-policy=no-user-gesture-required', '--mute-audio',
           '--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream'],
  });
  page = await browser.newPage();
  page.on('console', (m) => { if (m.type() === 'error') consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  await page.setViewport({ width: 1280, height: 900 });
  await page.goto(baseURL + '/', { waitUntil: 'load' });
  await page.waitForFunction(() => document.querySelector('#model').options.length >= 2, { timeout: 10000 });
});

after(async () => {
  if (browser) await browser.close();
  if (!server) return;
  await new Promise((resolve) => {
    server.removeAllListeners('exit');
    server.on('exit', resolve);
    server.kill('SIGTERM');
  });
});

const counters = () => page.evaluate(() => {
  const s = window.chorusPlayground;
  return { bytes: s.bytes, chunks: s.chunks, played: s.played, done: s.done, speaking: s.speaking, errors: s.errors.slice() };
});

async function choose(selector, value) {
  await page.select(selector, value);
}

async function setValue(selector, value) {
  await page.$eval(selector, (el, v) => { el.value = v; el.dispatchEvent(new Event('input', { bubbles: true })); }, value);
}

test('the page is served with its files and lists the models', async () => {
  const ids = await page.$$eval('#model option', (os) => os.map((o) => o.value));
  assert.deepEqual(ids, ['tiny_cv', 'tiny_base']);
  const voices = await page.$$eval('#voice option', (os) => os.map((o) => o.value));
  assert.ok(voices.includes('ryan'), `preset voices listed: ${voices}`);
  // Every form control has a label (accessibility).
  const unlabelled = await page.$$eval('input, select, textarea', (els) => els.filter((e) => !e.labels || e.labels.length === 0).map((e) => e.id));
  assert.deepEqual(unlabelled, []);
});

test('Speak streams audio and plays it', async () => {
  await choose('#model', 'tiny_cv');
  await choose('#voice', 'ryan');
  await page.$eval('#sampler-heading', (s) => s.click());
  await setValue('#max_new_tokens', '20');
  await setValue('#seed', '7');
  await setValue('#text', 'Hello from the playground test.');
  await page.click('#speak');
  await page.waitForFunction(() => window.chorusPlayground.done, { timeout: 30000 });
  const c = await counters();
  assert.ok(c.bytes > 0 && c.chunks > 0, `audio arrived: ${JSON.stringify(c)}`);
  assert.deepEqual(c.errors, []);
  const ttfa = await page.$eval('#ttfa', (e) => e.textContent);
  assert.match(ttfa, /^\d+ ms$/);
  assert.match(await page.$eval('#rtf', (e) => e.textContent), /real time/);
  // Played: buffers reach their end in the audio clock.
  await page.waitForFunction(() => window.chorusPlayground.played > 0, { timeout: 15000 });
  assert.equal(await page.$eval('#download', (b) => b.disabled), false);
  await page.screenshot({ path: path.join(shots, 'desktop.png'), fullPage: true });
  await page.setViewport({ width: 390, height: 844 });  // isMobile would reload the page
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at phone width (overflow ${overflow}px)`);
  await page.screenshot({ path: path.join(shots, 'phone.png'), fullPage: true });
  await page.setViewport({ width: 1280, height: 900 });
});

test('Stop cancels mid-stream, typed word by word', async () => {
  await choose('#model', 'tiny_cv');
  await choose('#voice', 'ryan');
  await setValue('#max_new_tokens', '2000');
  await setValue('#text', 'This is a long text that keeps going, word after word, sentence after sentence. ' +
    'It goes on and on so that there is time to press stop. And then some more words follow here.');
  await page.$eval('#llm', (c) => { c.checked = true; });
  await page.click('#speak');
  await page.waitForFunction(() => window.chorusPlayground.bytes > 0, { timeout: 30000 });
  await page.click('#stop');
  assert.equal(await page.$eval('#status', (e) => e.textContent), 'Stopped.');
  const atStop = (await counters()).bytes;
  await new Promise((r) => setTimeout(r, 1000));
  const c = await counters();
  assert.equal(c.done, false, 'the utterance did not run to its end');
  assert.equal(c.speaking, false);
  // What was already on the wire may land; the stream itself stopped (well short of 2000 frames).
  assert.ok(c.bytes - atStop < 2000 * 1920 * 2 / 4, `bytes after Stop: ${c.bytes - atStop}`);
  assert.deepEqual(c.errors, []);
  await page.$eval('#llm', (c) => { c.checked = false; });
});

test('a WAV uploaded on the page becomes a voice that speaks', async () => {
  const wav = path.join(work, 'ref.wav');
  writeFileSync(wav, sineWav(1.5));
  await choose('#model', 'tiny_base');
  assert.equal(await page.$eval('#mode', (m) => m.value), 'Base');
  assert.equal(await page.$eval('#new-voice', (f) => f.hidden), false);
  await setValue('#nv-name', 'Playground voice');
  const input = await page.$('#nv-file');
  await input.uploadFile(wav);
  await page.$eval('#nv-consent', (c) => { c.checked = true; });
  await page.click('#nv-create');
  await page.waitForFunction(() => /created/.test(document.querySelector('#status').textContent), { timeout: 20000 });
  const voice = await page.$eval('#voice', (v) => v.value);
  assert.match(voice, /^voice_/);
  await setValue('#max_new_tokens', '12');
  await setValue('#text', 'Now in the new voice.');
  await page.click('#speak');
  await page.waitForFunction(() => window.chorusPlayground.done, { timeout: 30000 });
  const c = await counters();
  assert.ok(c.bytes > 0, `audio in the new voice: ${JSON.stringify(c)}`);
  assert.deepEqual(c.errors, []);
});

test('a microphone recording becomes a voice', async () => {
  await choose('#model', 'tiny_base');
  await page.$eval('#nv-file', (f) => { f.value = ''; });
  await setValue('#nv-name', 'Microphone voice');
  await page.click('#nv-record');
  await page.waitForFunction(() => document.querySelector('#nv-record').getAttribute('aria-pressed') === 'true', { timeout: 5000 });
  await new Promise((r) => setTimeout(r, 1500));
  await page.click('#nv-record');
  await page.waitForFunction(() => /^Recorded /.test(document.querySelector('#nv-record-state').textContent), { timeout: 10000 });
  await page.$eval('#nv-consent', (c) => { c.checked = true; });
  await page.click('#nv-create');
  await page.waitForFunction(() => /Microphone voice.*created/.test(document.querySelector('#status').textContent), { timeout: 20000 });
  assert.match(await page.$eval('#voice', (v) => v.value), /^voice_/);
  assert.deepEqual((await counters()).errors, []);
});

test('errors are shown in words', async () => {
  await choose('#model', 'tiny_cv');
  await setValue('#temperature', '5');  // outside [0, 2]: the server names the field
  await setValue('#text', 'Hi.');
  await page.click('#speak');
  await page.waitForFunction(() => !document.querySelector('#error').hidden, { timeout: 10000 });
  const msg = await page.$eval('#error', (e) => e.textContent);
  assert.match(msg, /temperature/);
  await setValue('#temperature', '');
  await page.evaluate(() => { window.chorusPlayground.errors = []; });
});

test('no console errors', () => {
  assert.deepEqual(consoleErrors, []);
});
