#include "base/status.h"

namespace koi {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kIoError: return "i/o error";
    case StatusCode::kResourceExhausted: return "resource exhausted";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kDeadlineExceeded: return "deadline exceeded";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kAlreadyExists: return "already exists";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_prefix(std::string_view prefix) const {
  if (ok()) return *this;
  return Status(code_, std::string(prefix) + ": " + message_);
}

std::string quote(std::string_view s) {
  constexpr size_t kMaxBytes = 100;
  std::string out = "'";
  for (size_t idx = 0; idx < s.size() && idx < kMaxBytes; ++idx) {
    unsigned char c = static_cast<unsigned char>(s[idx]);
    if (c < 0x20 || c == 0x7F) {
      const char* hex = "0123456789abcdef";
      out += {'\\', 'x', hex[c >> 4], hex[c & 15]};
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxBytes) out += "...";
  return out + "'";
}

}  // namespace koi
