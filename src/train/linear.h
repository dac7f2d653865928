// The linear layer of the training passes, y = x W^T + b, forward and backward, shared by
// LlamaTrain and the LoRA adapters. Matrices are row-major [out, in] (Hugging Face layout).
// All three products go through kernels::sgemm with strided operands (no transposed copies), so
// every reduction runs in the kernel's fixed order whatever the thread count. Plain functions
// on caller-owned buffers; the work runs on the given pool.
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"

namespace koi::train {

// Grows buf to at least n floats (never shrinks).
void ensure(std::vector<float>& buf, int64_t n);
// dst[i] += src[i], i < n.
void add_into(float* dst, const float* src, int64_t n);

// y (N, out) = x (N, in) W^T + b;  W (out, in), b (out) or nullptr.
void linear_forward(ThreadPool* pool, float* y, const float* x, const float* w, const float* b, int64_t N, int64_t in,
                    int64_t out);

// dx (N, in) += dy (N, out) W;  dW (out, in) += dy^T x;  db (out) += sum_n dy.
// dx, dw, db may each be nullptr (not computed: a frozen weight, the first layer's input).
void linear_backward(ThreadPool* pool, float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                     int64_t N, int64_t in, int64_t out);

}  // namespace koi::train
