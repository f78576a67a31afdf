// Hugging Face tokenizers (npm binding of the Rust core) on the benchmark corpus, one line at a
// time, one thread. Prints the wall and CPU seconds spent in encode and writes the ids as JSON lines.
//   node hf_encode.js TOKENIZER_JSON CORPUS_JSONL OUT_JSONL
const fs = require("fs");
const { Tokenizer } = require("tokenizers");

async function main() {
  const [tokenizerPath, corpusPath, outPath] = process.argv.slice(2);
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const texts = fs.readFileSync(corpusPath, "utf8").split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l).text);
  const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, "utf8"), 0);
  // Warm-up on a few lines (first-call costs), not timed.
  for (const t of texts.slice(0, 20)) await tokenizer.encode(t, null, { addSpecialTokens: false });
  const ids = new Array(texts.length);
  const cpuStart = process.cpuUsage();
  const start = process.hrtime.bigint();
  for (let i = 0; i < texts.length; ++i) {
    ids[i] = (await tokenizer.encode(texts[i], null, { addSpecialTokens: false })).getIds();
  }
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const cpu = process.cpuUsage(cpuStart);
  const cpuSeconds = (cpu.user + cpu.system) / 1e6;
  fs.writeFileSync(outPath, ids.map((x) => JSON.stringify({ ids: Array.from(x) })).join("\n") + "\n");
  console.log(JSON.stringify({ bytes, seconds, cpu_seconds: cpuSeconds, mb_per_s: bytes / 1e6 / seconds }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
