#include "gateway/api_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "base/check.h"

namespace koi::gateway {

namespace {

constexpr size_t kIdBytes = 4;
constexpr size_t kSecretBytes = 16;
constexpr size_t kSaltBytes = 16;

std::string random_hex(size_t bytes) {
  unsigned char buf[32];
  KOI_CHECK(bytes <= sizeof buf && RAND_bytes(buf, static_cast<int>(bytes)) == 1);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    out += kHex[buf[i] >> 4];
    out += kHex[buf[i] & 15];
  }
  return out;
}

bool is_hex(std::string_view s, size_t len) {
  if (s.size() != len) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

std::string hash_secret(std::string_view salt_hex, std::string_view secret) {
  unsigned char digest[32];
  unsigned int len = 0;
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  KOI_CHECK(ctx != nullptr);
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  EVP_DigestUpdate(ctx, salt_hex.data(), salt_hex.size());
  EVP_DigestUpdate(ctx, secret.data(), secret.size());
  EVP_DigestFinal_ex(ctx, digest, &len);
  EVP_MD_CTX_free(ctx);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "sha256:" + std::string(salt_hex) + ":";
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

Status validate_key_hash(std::string_view hash) {
  const size_t salt_len = 2 * kSaltBytes;
  if (hash.size() != 7 + salt_len + 1 + 64 || hash.substr(0, 7) != "sha256:" || hash[7 + salt_len] != ':' ||
      !is_hex(hash.substr(7, salt_len), salt_len) || !is_hex(hash.substr(8 + salt_len), 64)) {
    return Status::invalid_argument(
        "a key hash must read sha256:<32 hex salt>:<64 hex digest>; create keys with `koi gateway keygen`");
  }
  return ok_status();
}

IssuedKey issue_key(std::string tenant) {
  IssuedKey k;
  k.record.id = random_hex(kIdBytes);
  k.record.tenant = std::move(tenant);
  const std::string secret = random_hex(kSecretBytes);
  k.record.hash = hash_secret(random_hex(kSaltBytes), secret);
  k.key = "koi-" + k.record.id + "-" + secret;
  return k;
}

std::optional<KeyRecord> KeyRing::verify(std::string_view presented) const {
  const size_t id_len = 2 * kIdBytes, secret_len = 2 * kSecretBytes;
  if (presented.size() != 4 + id_len + 1 + secret_len || presented.substr(0, 4) != "koi-" || presented[4 + id_len] != '-') {
    return std::nullopt;
  }
  auto it = keys_.find(std::string(presented.substr(4, id_len)));
  if (it == keys_.end()) return std::nullopt;
  const std::string& stored = it->second.hash;
  const std::string computed = hash_secret(std::string_view(stored).substr(7, 2 * kSaltBytes), presented.substr(5 + id_len));
  if (computed.size() != stored.size() || CRYPTO_memcmp(computed.data(), stored.data(), stored.size()) != 0) {
    return std::nullopt;
  }
  return it->second;
}

}  // namespace koi::gateway
