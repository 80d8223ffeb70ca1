// Kiln's error type for module boundaries: Status (code + message) and Result<T> (value or Status).
// Codes carry the same numeric values as grpc::StatusCode, so services map them one to one
// (server/rpc_context.h ToGrpc). Exceptions never cross a module boundary that returns these.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

/// Canonical error codes; numeric values equal gRPC's (<grpcpp/support/status_code_enum.h>).
enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

/// Name of a code as gRPC spells it ("INVALID_ARGUMENT"), for logs and metric labels.
const char* StatusCodeName(StatusCode code);

/// An operation's outcome: ok, or a code plus a message a user can act on.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "CODE: message", for logs.
  std::string ToString() const;

  /// Returns a copy whose message is "prefix: message" (keeps the code).
  Status WithContext(const std::string& prefix) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }

/// A value of type T, or the Status that explains why there is none. Never holds an ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(implicit)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(implicit)
    assert(!std::get<Status>(v_).ok() && "Result built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kiln

/// Returns early from the enclosing function when `expr` (a Status) is not ok.
#define KILN_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::kiln::Status kiln_status_ = (expr);     \
    if (!kiln_status_.ok()) return kiln_status_; \
  } while (0)
