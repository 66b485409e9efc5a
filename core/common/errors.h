#pragma once
// Error types of the engine.
//
// Two kinds of failure exist. A broken invariant is a bug: HORA_CHECK throws InternalError with the
// file and line. Everything a user can act on is a typed Error subclass whose message says what
// happened, on which rank, for which tensor, and what to do. The background thread never lets an
// exception cross threads: it stores an exception_ptr in the affected Handles, and the caller's
// thread rethrows it. bindings/errors.cc maps each ErrorCode to one hora.* Python exception.
#include <stdexcept>
#include <string>

namespace hora {

enum class ErrorCode {
  Internal,
  InvalidArgument,
  Mismatch,
  Io,
  Timeout,
  NotSupported,
  Shutdown,
  InvalidCollective,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// A bug in the engine: carries file:line.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& m) : Error(ErrorCode::Internal, m) {}
};
// The caller passed something unusable (bad dtype, duplicate in-flight name, bad root...).
class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& m) : Error(ErrorCode::InvalidArgument, m) {}
};
// Ranks asked for incompatible things under one tensor name.
class MismatchError : public Error {
 public:
  explicit MismatchError(const std::string& m) : Error(ErrorCode::Mismatch, m) {}
};
// The ranks agreed on an operation the engine cannot run (allgather while ranks have joined,
// Adasum on a rank count that is not a power of two, an existing process set...).
class InvalidCollectiveError : public Error {
 public:
  explicit InvalidCollectiveError(const std::string& m) : Error(ErrorCode::InvalidCollective, m) {}
};
// A connection failed, a peer closed it, or a frame was malformed.
class IoError : public Error {
 public:
  explicit IoError(const std::string& m) : Error(ErrorCode::Io, m) {}
};
// A handshake's proof of the job secret failed: the two ends hold different secrets.
class AuthenticationError : public IoError {
 public:
  explicit AuthenticationError(const std::string& m) : IoError(m) {}
};
// A bounded wait ran out.
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& m) : Error(ErrorCode::Timeout, m) {}
};
// The backend or build lacks the operation.
class NotSupported : public Error {
 public:
  explicit NotSupported(const std::string& m) : Error(ErrorCode::NotSupported, m) {}
};
// The runtime was shut down (locally, or because a peer failed) while work was pending.
class ShutdownError : public Error {
 public:
  explicit ShutdownError(const std::string& m) : Error(ErrorCode::Shutdown, m) {}
};

[[noreturn]] void throwInternal(const char* file, int line, const std::string& message);

}  // namespace hora

#define HORA_CHECK(cond, msg)                                                                      \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      ::hora::throwInternal(__FILE__, __LINE__, std::string("check failed: " #cond ": ") + (msg)); \
  } while (0)
