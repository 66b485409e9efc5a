#pragma once
// Request and reply types of the TCP store protocol (frames with kStoreMagic, see
// core/net/frame.h). Payload fields are little endian; strings are u32 length + bytes.
//
//   Set   {key, value}                 -> Ok
//   Get   {timeoutMs u64, key}         -> Value {value} | TimedOut {missing keys}
//   Add   {key, delta i64}             -> Counter {i64} | Error {message}
//   Check {n u32, keys}                -> Bool {u8}
//   Wait  {timeoutMs u64, n u32, keys} -> Ok | TimedOut {missing keys}
//   GetMany {timeoutMs u64, n u32, keys} -> Values {n u32, n x (present u8, value)}: answered
//         once every key exists or at the timeout, with what exists then (never TimedOut)
//   TimedOut carries {timeoutMs u64, n u32, keys}.
#include <cstddef>
#include <cstdint>

namespace hora {
namespace store_protocol {

enum Type : uint16_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kCheck = 4,
  kWait = 5,
  kGetMany = 6,
  kOk = 100,
  kValue = 101,
  kCounter = 102,
  kBool = 103,
  kTimedOut = 104,
  kError = 105,
  kValues = 106,
};

// The reply types run from kOk to kValues without a gap; a new reply type extends the range.
constexpr bool isReplyType(uint16_t type) { return type >= kOk && type <= kValues; }

// Largest frame either side accepts; a larger announced length is treated as garbage.
constexpr uint32_t kMaxFrameBytes = 64u << 20;
// What the server keeps buffered behind a parked request: one largest frame plus one read.
constexpr size_t kMaxParkedInputBytes = size_t{kMaxFrameBytes} + (64u << 10);
// Longest wait a request may ask for (about 11 days): keeps deadlines far from overflow.
constexpr uint64_t kMaxWaitMs = 1000000000ull;

}  // namespace store_protocol
}  // namespace hora
