// The engine flags, registered one way for every command that builds an engine through
// engine/engine_builder.h (serve, generate, eval, bench offline, bench model): one spelling
// and one help text per setting. A command picks the groups that mean something for it.
// The values are range-checked by engine::check() when the engine is built, so a bad value
// is a one-line error naming the flag.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "engine/engine_builder.h"

namespace koi::cli {

// Flag groups, combined with |.
inline constexpr unsigned kModelFlags = 1u << 0;        // -m/--model, --threads, --pin-threads
inline constexpr unsigned kMemoryFlags = 1u << 1;       // --kv-cache-memory, --block-size, --max-num-batched-tokens
                                                        // (and kKvDtypeFlags)
inline constexpr unsigned kBatchFlags = 1u << 2;        // --max-num-seqs
inline constexpr unsigned kPrefixCacheFlags = 1u << 3;  // --no-prefix-caching
inline constexpr unsigned kSpeculativeFlags = 1u << 4;  // --speculative, --num-speculative-tokens, --draft-model
inline constexpr unsigned kLoraFlags = 1u << 5;         // --lora, --max-loras, --lora-memory-mib
inline constexpr unsigned kKvDtypeFlags = 1u << 6;      // --kv-dtype
inline constexpr unsigned kAllEngineFlags = (1u << 7) - 1;

// Declares the flags of `groups` on `app`, writing into `options` (whose current values are
// the defaults shown in --help). `threads_names` spells the threads flag (CLI11 syntax).
void add_engine_flags(CLI::App* app, engine::EngineOptions* options, unsigned groups,
                      const std::string& threads_names = "--threads");

}  // namespace koi::cli
