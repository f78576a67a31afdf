#!/usr/bin/env python3
"""Where the device sampler's time goes, stage by stage (run here; the binary runs on the GPU machine).

Builds a copy of src/runtime/cuda/sampler.cu (of the working tree or of a revision) whose kernel
stops after a given stage, and a harness that times each stop as 300 launches replayed from one CUDA
graph (one row, top-k 50, temperature 0.9, as the code predictor samples), for 2048, 2051 and 3072 ids
(2051 both with 4 and with 8 ids per thread, where the revision's kernel takes it).
Each column is cumulative: the kernel up to and including that stage.

  scripts/device/sampler_stages.py --name new                  # the working tree
  scripts/device/sampler_stages.py --name old --rev HEAD~1     # a revision, to compare in one run
  # then, with .devcarry/probe carried: .devcarry/probe/sampler_stages_new; ..._old

The stops are inserted at marker lines of the kernel; the script fails if one is missing, so a
rewritten kernel needs its markers here updated.
"""
import argparse
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]

# (text in the kernel, its replacement): mode k returns at stop k; mode 0 runs the whole kernel.
STOPS = [
    ("  int choice = all.best_i;  // greedy: the first id of the largest logit\n",
     "  int choice = all.best_i;  // greedy: the first id of the largest logit\n"
     "  if (kMode == 1) { if (tid == 0) a.out[r] = choice; return; }\n"),
    ("    // 5. The top-k survivors",
     "    if (kMode == 2) { int c = 0; for (int j = 0; j < kPer; ++j) c += v[j] != kNegInf; if (c < 0) a.out[r] = c; return; }\n"
     "    // 5. The top-k survivors"),
    ("    __syncthreads();\n    // 7. Top-p",
     "    __syncthreads();\n    if (kMode == 3) { if (tid == 0) a.out[r] = cid[0]; return; }\n    // 7. Top-p"),
]

HARNESS = r'''
#include <cstdio>
#include <random>
#include <vector>

using namespace chorus::cuda;

#define CHECK(x)                                                              \
  do {                                                                        \
    const cudaError_t e = (x);                                                \
    if (e != cudaSuccess) {                                                   \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e));                     \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

constexpr int kLaunches = 300;

// Microseconds per launch: kLaunches PDL launches captured in one graph, best of 5 replays.
template <class Kernel>
float per_launch_us(Kernel kernel, int threads, const SampleArgs& a, cudaStream_t s) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kLaunches; ++i) CHECK(launch(kernel, dim3(1), dim3(threads), 0, s, a));
  CHECK(cudaStreamEndCapture(s, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  float best = 1e30f;
  for (int rep = 0; rep < 7; ++rep) {
    CHECK(cudaEventRecord(start, s));
    CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(stop, s));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (rep >= 2 && ms < best) best = ms;  // the first replays warm up
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  return best * 1000.0f / kLaunches;
}

template <int kPer>
void stages(int V, float sigma, cudaStream_t s) {
  const int threads = (V + 32 * kPer - 1) / (32 * kPer) * 32;
  if (threads > kMaxThreads) return;  // this revision's kernel cannot take that many
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> host(V);
  for (float& x : host) x = normal(rng);
  float* logits;
  CHECK(cudaMalloc(&logits, V * sizeof(float)));
  CHECK(cudaMemcpy(logits, host.data(), V * sizeof(float), cudaMemcpyHostToDevice));
  DeviceSampler p;
  p.temperature = 0.9f;
  p.top_k = 50;
  p.seed_lo = 1;
  DeviceSampler* params;
  CHECK(cudaMalloc(&params, sizeof p));
  CHECK(cudaMemcpy(params, &p, sizeof p, cudaMemcpyHostToDevice));
  int32_t *out, *ids;
  double* weights;
  float* embed_out;
  uint16_t* table;
  CHECK(cudaMalloc(&out, sizeof(int32_t)));
  CHECK(cudaMalloc(&weights, V * sizeof(double)));
  CHECK(cudaMalloc(&ids, 2 * V * sizeof(int32_t)));
  CHECK(cudaMalloc(&embed_out, 1024 * sizeof(float)));
  CHECK(cudaMalloc(&table, static_cast<size_t>(V) * 1024 * sizeof(uint16_t)));
  CHECK(cudaMemset(table, 0, static_cast<size_t>(V) * 1024 * sizeof(uint16_t)));
  SampleArgs a;
  a.logits = logits;
  a.ld = V;
  a.vocab = V;
  a.rows = 1;
  a.params = params;
  a.out = out;
  a.scratch_w = weights;
  a.scratch_ids = ids;
  SampleArgs embedding = a;  // the code predictor also writes the chosen id's embedding row
  embedding.embed_table = table;
  embedding.embed_out = embed_out;
  embedding.embed_dim = 1024;
  std::printf(TAG " %d ids, logits N(0, %.0f), %d threads: empty kernel %.2f | validity and max %.2f | "
              "+ top-k %.2f | + weights and kept ids %.2f | + draw %.2f | + embedding row %.2f us\n",
              V, sigma, threads, per_launch_us(empty_kernel, threads, a, s),
              per_launch_us(sample_kernel<kPer, 1>, threads, a, s), per_launch_us(sample_kernel<kPer, 2>, threads, a, s),
              per_launch_us(sample_kernel<kPer, 3>, threads, a, s), per_launch_us(sample_kernel<kPer, 0>, threads, a, s),
              per_launch_us(sample_kernel<kPer, 0>, threads, embedding, s));
  for (void* ptr : {static_cast<void*>(logits), static_cast<void*>(params), static_cast<void*>(out),
                    static_cast<void*>(weights), static_cast<void*>(ids), static_cast<void*>(embed_out),
                    static_cast<void*>(table)})
    CHECK(cudaFree(ptr));
}

int main() {
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  for (float sigma : {1.0f, 3.0f, 8.0f}) {
    stages<4>(2048, sigma, s);
    stages<8>(2051, sigma, s);  // Breeze's depth decoder
    stages<4>(2051, sigma, s);
    stages<8>(3072, sigma, s);
  }
  return 0;
}
'''


def staged_source(src: str, tag: str) -> str:
    def replace_once(text: str, old: str, new: str) -> str:
        if text.count(old) != 1:
            sys.exit(f"sampler_stages: marker not found once in sampler.cu: {old!r}")
        return text.replace(old, new)

    src = replace_once(src, "template <int kPer>\n__global__", "template <int kPer, int kMode>\n__global__")
    for old, new in STOPS:
        src = replace_once(src, old, new)
    # Keep the kernels, drop the host entry points (the harness launches the kernels itself).
    cut = "}  // namespace\n\nStatus sample("
    if cut not in src:
        sys.exit("sampler_stages: the kernels' namespace end not found in sampler.cu")
    src = src[: src.index(cut)] + "}  // namespace\n}  // namespace chorus::cuda\n"
    src = replace_once(src, "namespace {\n\nconstexpr int kMaxThreads",
                       "namespace {\n__global__ void empty_kernel(SampleArgs a) {\n  dev::pdl_wait();\n"
                       "  if (threadIdx.x == 0) a.out[0] = 1;\n}\n\nconstexpr int kMaxThreads")
    src = src.replace("__global__ void uniform_kernel", "[[maybe_unused]] __global__ void uniform_kernel")
    return f'#define TAG "{tag}"\n' + src + HARNESS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True, help="label and binary suffix (sampler_stages_NAME)")
    ap.add_argument("--rev", help="git revision of sampler.cu (default: the working tree)")
    ap.add_argument("--out", default=str(ROOT / ".devcarry" / "probe"), help="output folder (git-ignored)")
    args = ap.parse_args()
    path = "src/runtime/cuda/sampler.cu"
    if args.rev:
        src = subprocess.run(["git", "-C", str(ROOT), "show", f"{args.rev}:{path}"], check=True,
                             capture_output=True, text=True).stdout
    else:
        src = (ROOT / path).read_text()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cu = out / f"sampler_stages_{args.name}.cu"
    cu.write_text(staged_source(src, args.name))
    binary = out / f"sampler_stages_{args.name}"
    subprocess.run(["nvcc", "-DCHORUS_HAVE_CUDA=1", f"-I{ROOT / 'src'}", "-O3", "-arch=sm_90", "-std=c++17",
                    "-diag-suppress", "177", str(cu), "-o", str(binary)], check=True)
    print(binary)


if __name__ == "__main__":
    main()
