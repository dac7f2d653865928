// UTF-8 and byte-level helpers shared by the encoders and decoders. Pure functions,
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace koi::tokenizer {

// Length of the next piece of `text` at `pos` the way llama2.c's encode() cuts text: a byte
// followed by its continuation bytes (10xxxxxx), at most 4 bytes. On valid UTF-8 this is
// one character; invalid bytes come out in small groups that no vocabulary holds.
size_t utf8_piece_len(std::string_view text, size_t pos);

// The UTF-8 bytes of code point `cp` (1 to 4 bytes; the caller passes a valid code point).
std::string encode_utf8(uint32_t cp);

// True when `s` is well-formed UTF-8 by its lead bytes (each lead byte followed by as many
// continuation bytes as it announces; no stray continuation byte).
bool valid_utf8(std::string_view s);

// Number of bytes a character starting with `lead` has (1 for a byte that cannot start
// one).
size_t utf8_char_len(uint8_t lead);

// GPT-2's bytes_to_unicode: every byte as a printable character ("Ġ" for a space), in
// UTF-8.
std::string_view byte_to_unicode(uint8_t byte);
// Appends byte_to_unicode of every byte of `bytes`.
void append_byte_level(std::string_view bytes, std::string* out);
// The inverse: appends the bytes that a byte-level text stands for. Characters outside the
// alphabet are appended unchanged.
void append_byte_level_decoded(std::string_view text, std::string* out);

// "<0x0A>" -> 10; -1 when `text` is not of that form.
int parse_byte_token(std::string_view text);
// 10 -> "<0x0A>": the text of a SentencePiece byte-fallback token.
std::string byte_token_text(uint8_t byte);

// Replaces every occurrence of `from` by `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace koi::tokenizer
