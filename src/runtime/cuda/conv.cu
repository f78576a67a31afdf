// Codec-decoder kernels, part 1: streaming convolutions, SnakeBeta and the GEMM wrapper
// (conv_ops.h). One thread per output element: these layers are small per frame and the matrix
// products go through cuBLAS, so the kernels here are memory-bound gathers and element-wise ops.
#include <cublas_v2.h>

#include <climits>
#include <string>

#include "runtime/cuda/conv_ops.h"
#include "runtime/cuda/cuda_handles.h"

namespace chorus::cuda::codec_ops {

namespace {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

__device__ __forceinline__ float snake(float v, float alpha, float inv_beta) {
  const float s = sinf(v * alpha);
  return v + inv_beta * (s * s);
}

// Column j of [hist | act(x)] for channel c (j < H: history, else input column j − H).
__device__ __forceinline__ float padded_at(const float* hist, const float* x, int64_t xcs, int64_t xts, int64_t H,
                                           int64_t c, int64_t j, Snake sn) {
  if (j < H) return hist[c * H + j];
  const float v = x[c * xcs + (j - H) * xts];
  return sn.alpha ? snake(v, sn.alpha[c], sn.inv_beta[c]) : v;
}

__global__ void im2col_kernel(const float* hist_in, float* hist_out, const float* x, int64_t xcs, int64_t xts,
                              int64_t cin, int64_t n, int64_t K, int64_t dil, Snake sn, float* col) {
  const int64_t H = (K - 1) * dil, ncol = cin * K * n;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < ncol) {
    const int64_t t = i % n, ck = i / n, k = ck % K, c = ck / K;
    col[i] = padded_at(hist_in, x, xcs, xts, H, c, t + k * dil, sn);
  } else if (i < ncol + cin * H) {
    const int64_t r = i - ncol, c = r / H, j = r % H;
    hist_out[c * H + j] = padded_at(hist_in, x, xcs, xts, H, c, n + j, sn);
  }
}

__global__ void depthwise_kernel(const float* hist_in, float* hist_out, const float* x, int64_t C, int64_t n,
                                 const float* w, const float* bias, int64_t K, int64_t dil, float* y) {
  const int64_t H = (K - 1) * dil;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const Snake none{};
  if (i < C * n) {
    const int64_t c = i / n, t = i % n;
    float acc = bias ? bias[c] : 0.0f;
    for (int64_t k = 0; k < K; ++k) acc += w[c * K + k] * padded_at(hist_in, x, n, 1, H, c, t + k * dil, none);
    y[i] = acc;
  } else if (i < C * n + C * H) {
    const int64_t r = i - C * n, c = r / H, j = r % H;
    hist_out[c * H + j] = padded_at(hist_in, x, n, 1, H, c, n + j, none);
  }
}

__global__ void transposed_output_kernel(const float* z, const float* zhist_in, float* zhist_out, int64_t cout,
                                         int64_t n, int64_t K, int64_t S, const float* bias, float* y) {
  const int64_t len = n * S;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < cout * len) {
    const int64_t c = i / len, p = i % len, t = p / S, j = p % S;
    float v = bias ? bias[c] : 0.0f;
    const int64_t jp = j + S;  // tap of the previous input that lands on this sample
    if (jp < K) v += t > 0 ? z[(c * K + jp) * n + t - 1] : zhist_in[c * K + jp];
    v += z[(c * K + j) * n + t];
    y[i] = v;
  } else if (zhist_out && i < cout * len + cout * K) {
    const int64_t r = i - cout * len;
    zhist_out[r] = z[r * n + n - 1];
  }
}

__global__ void channel_op_kernel(ChannelOp op) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= op.channels * op.steps) return;
  const int64_t c = i / op.steps, t = i % op.steps;
  float v = op.x[c * op.xcs + t * op.xts];
  if (op.bias) v += op.bias[c];
  if (op.snake.alpha) v = snake(v, op.snake.alpha[c], op.snake.inv_beta[c]);
  if (op.residual) v += op.residual[i];
  if (op.clamp) v = v < -1.0f ? -1.0f : (v > 1.0f ? 1.0f : v);
  op.y[c * op.ycs + t * op.yts] = v;
}

Status launched(const char* what) { return check(cudaGetLastError(), what); }

}  // namespace

Status sgemm(cublasHandle_t h, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
             const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  for (int64_t v : {M, N, K, lda, ldb, ldc})
    if (v < 0 || v > INT_MAX) return make_error(ErrorCode::kOutOfRange, "sgemm: dimension beyond the int range");
  if (M == 0 || N == 0) return ok_status();
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the operands.
  const cublasStatus_t st =
      cublasSgemm(h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N),
                  static_cast<int>(M), static_cast<int>(K), &alpha, B, static_cast<int>(ldb), A,
                  static_cast<int>(lda), &beta, C, static_cast<int>(ldc));
  if (st != CUBLAS_STATUS_SUCCESS)
    return make_error(ErrorCode::kInternal, "cublasSgemm failed (status " + std::to_string(static_cast<int>(st)) + ")");
  return ok_status();
}

Status im2col_causal(const float* hist_in, float* hist_out, const float* x, int64_t xcs, int64_t xts, int64_t cin,
                     int64_t n, int64_t kernel, int64_t dilation, Snake snake, float* col, cudaStream_t s) {
  const int64_t total = cin * kernel * n + cin * (kernel - 1) * dilation;
  if (total == 0) return ok_status();
  im2col_kernel<<<blocks_for(total), kThreads, 0, s>>>(hist_in, hist_out, x, xcs, xts, cin, n, kernel, dilation, snake,
                                                        col);
  return launched("im2col_causal");
}

Status depthwise_causal(const float* hist_in, float* hist_out, const float* x, int64_t channels, int64_t n,
                        const float* weight, const float* bias, int64_t kernel, int64_t dilation, float* y,
                        cudaStream_t s) {
  const int64_t total = channels * n + channels * (kernel - 1) * dilation;
  if (total == 0) return ok_status();
  depthwise_kernel<<<blocks_for(total), kThreads, 0, s>>>(hist_in, hist_out, x, channels, n, weight, bias, kernel,
                                                           dilation, y);
  return launched("depthwise_causal");
}

Status transposed_conv_output(const float* z, const float* zhist_in, float* zhist_out, int64_t cout, int64_t n,
                              int64_t kernel, int64_t stride, const float* bias, float* y, cudaStream_t s) {
  if (kernel < stride || kernel > 2 * stride)
    return make_error(ErrorCode::kUnsupported, "transposed conv on the GPU needs stride <= kernel <= 2·stride");
  if (kernel > stride && (!zhist_in || !zhist_out))
    return make_error(ErrorCode::kInvalidArgument, "transposed conv with overlap needs its history");
  const int64_t total = cout * n * stride + (zhist_out ? cout * kernel : 0);
  if (n == 0) return ok_status();
  transposed_output_kernel<<<blocks_for(total), kThreads, 0, s>>>(z, zhist_in, zhist_out, cout, n, kernel, stride,
                                                                   bias, y);
  return launched("transposed_conv_output");
}

Status channel_op(const ChannelOp& op, cudaStream_t s) {
  const int64_t total = op.channels * op.steps;
  if (total == 0) return ok_status();
  channel_op_kernel<<<blocks_for(total), kThreads, 0, s>>>(op);
  return launched("channel_op");
}

}  // namespace chorus::cuda::codec_ops
