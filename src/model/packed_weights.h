// PackedWeights: the matrices LlamaModel multiplies on every step (the attention and dense FFN
// projections of each layer, and the classifier) as kernels::PackedMatrix, built once when the
// model is constructed. q8_0/q4_0 matrices get the kernels' panel layout, so batched decode
// never repacks; other types keep their view and are read as stored.
//
// Memory: the panels take the bytes of the file's blocks. Where a packed tensor lies in a shared,
// file-backed mapping (a GGUF file), its whole pages are given back with madvise(MADV_DONTNEED)
// right after it is packed: the file stays mapped, not copied, its views stay valid (a page read
// again faults back in from the page cache), and resident memory stays about the file's size.
// token_embd (read row by row for the embedding) is never given back, even when the classifier
// shares it. Heap-owned weights (tests, llama2.c imports) are never touched.
// Immutable after pack_weights(); safe to read from many threads.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/packed_matrix.h"
#include "model/weights.h"

namespace koi::model {

struct PackedLayerWeights {
  kernels::PackedMatrix wq, wk, wv, wo;
  kernels::PackedMatrix w_gate, w_up, w_down;  // views without data for mixture-of-experts layers
};

struct PackedWeights {
  std::vector<PackedLayerWeights> layers;
  kernels::PackedMatrix output;
  int64_t packed_bytes = 0;    // bytes of panels built
  int64_t released_bytes = 0;  // bytes of mapped file pages given back after packing
};

// Packs w's per-step matrices (views into w, which must outlive the result).
PackedWeights pack_weights(const ModelWeights& w);

}  // namespace koi::model
