// API keys. A key is "koi-<id>-<secret>": the id (8 hex digits) names the key in logs, the
// ledger and the admin API; the secret (32 hex digits, 128 random bits from OpenSSL's
// RAND_bytes) is never stored. What is stored is a KeyRecord with a random 16-byte salt and
// SHA-256(salt || secret), written "sha256:<salt hex>:<digest hex>". Secrets are random, so
// one salted hash is enough (a slow KDF protects guessable passwords, not 128-bit secrets)
// and keeps verification cheap on every request. Digests are compared with CRYPTO_memcmp in
// constant time. KeyRing is a plain map; the gateway guards it with its state lock.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace koi::gateway {

struct KeyRecord {
  std::string id;
  std::string tenant;
  std::string hash;  // "sha256:<salt hex>:<digest hex>"
};

struct IssuedKey {
  std::string key;  // shown once to the operator
  KeyRecord record;
};

IssuedKey issue_key(std::string tenant);
// Hashes `secret` with a given salt (hex) into the stored form.
std::string hash_secret(std::string_view salt_hex, std::string_view secret);
Status validate_key_hash(std::string_view hash);

class KeyRing {
 public:
  void put(KeyRecord record) { keys_[record.id] = std::move(record); }
  bool revoke(const std::string& id) { return keys_.erase(id) > 0; }
  // The record of a presented key, or nullopt when it is malformed, unknown or wrong.
  std::optional<KeyRecord> verify(std::string_view presented) const;
  size_t size() const { return keys_.size(); }

 private:
  std::map<std::string, KeyRecord> keys_;
};

}  // namespace koi::gateway
