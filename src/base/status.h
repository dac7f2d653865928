// Status and Result<T>: expected failures as values (LevelDB style).
//
// A Status is either OK or carries a code and a one-line message written for the user
// ("model.gguf: tensor 'blk.0.attn_q.weight' extends past the end of the file; the file is
// truncated, download or export it again"). Result<T> holds a T or a non-OK Status.
// Exceptions never cross a module boundary: code that calls a throwing library catches at
// the edge and returns a Status. Both types are plain values; not thread-safe to mutate
// concurrently, safe to copy across threads.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace koi {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad input from a user or a file
  kNotFound,           // a file, model, key or object that does not exist
  kCorrupt,            // a file whose bytes contradict its own format
  kUnsupported,        // valid input that Koi does not handle (yet)
  kIoError,            // the operating system refused
  kResourceExhausted,  // out of KV blocks, queue full, over a limit
  kUnavailable,        // a peer is down or not ready
  kCancelled,
  kDeadlineExceeded,
  kFailedPrecondition,
  kAlreadyExists,
  kInternal,
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  static Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status corrupt(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
  static Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
  static Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status deadline_exceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
  static Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status already_exists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt: <message>", or "ok".
  std::string to_string() const;
  // Returns a copy whose message is "<prefix>: <message>" (for adding the file name, say).
  Status with_prefix(std::string_view prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }

// `s` in single quotes for a one-line message: control bytes become \xNN and anything past
// 100 bytes becomes "...", so that a name read from a hostile file cannot break the line.
std::string quote(std::string_view s);

// Result<T>: a value or a non-OK Status. Constructing one from an OK Status is a programmer
// error (aborts).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) std::abort();
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace koi

#define KOI_CONCAT_INNER(a, b) a##b
#define KOI_CONCAT(a, b) KOI_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define KOI_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::koi::Status koi_status_ = (expr);        \
    if (!koi_status_.ok()) return koi_status_; \
  } while (0)

// KOI_ASSIGN_OR_RETURN(auto x, make_x()); returns the Status if the Result is an error.
#define KOI_ASSIGN_OR_RETURN(lhs, expr) \
  KOI_ASSIGN_OR_RETURN_IMPL(KOI_CONCAT(koi_result_, __LINE__), lhs, expr)
#define KOI_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
