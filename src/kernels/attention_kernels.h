// Internal to src/kernels: one work item of the fused attention (attention.h) and the entry point
// of each level that computes items. Only attention.cc calls these; nothing here allocates
// beyond a per-thread scratch that only grows, and nothing fails.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/attention.h"

namespace koi::kernels {

struct AttentionArgs {
  AttentionShape shape;
  const float* q;
  PagedKv kv;
  float* out;
};

// Tokens [token_begin, token_end) of `run` (offsets from run->first_token) against KV head
// kv_head: (token_end - token_begin) * group rows.
struct AttentionItem {
  const AttentionRun* run;
  int64_t token_begin, token_end;
  int kv_head;
};

namespace portable {
void attention_items(const AttentionArgs& a, std::span<const AttentionItem> items);
}  // namespace portable
namespace avx2 {
void attention_items(const AttentionArgs& a, std::span<const AttentionItem> items);
}  // namespace avx2
namespace avx512 {
void attention_items(const AttentionArgs& a, std::span<const AttentionItem> items);
}  // namespace avx512

}  // namespace koi::kernels
