#pragma once
// InboundStream: the reader of the bytes one peer sends on its connection after the handshake (a
// sequence of message headers and payloads, message_header.h), feeding a Mailbox. Socket-free: the
// caller asks where the next bytes go, reads into that span, and reports how many it wrote, so
// payloads land straight in a posted receive's buffer and the same code runs under the fuzzer.
//
//   PayloadChunk span = stream.next();        // never empty while !failed()
//   size_t n = read(fd, span.data, span.bytes);
//   stream.advance(n);                         // exactly once per next(), n may be 0
//
// A header that does not decode fails the stream for good (failed(), failure() says why): the
// byte stream cannot be resynchronised, so the caller drops the connection. Not thread-safe: one
// reader (the I/O thread) per stream; the mailbox it feeds is thread-safe.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/p2p/mailbox.h"
#include "core/p2p/message_header.h"

namespace hora {
namespace p2p {

class InboundStream {
 public:
  InboundStream(Mailbox& mailbox, int source);

  // Where the next bytes go. data is never null: a payload being discarded is read into a
  // scratch buffer of the stream's own.
  PayloadChunk next();
  void advance(size_t written);

  bool failed() const { return !failure_.empty(); }
  const std::string& failure() const { return failure_; }
  // True between messages (nothing of a header or payload read): an end of the stream here is a
  // clean close, elsewhere it cuts a message short.
  bool atMessageBoundary() const { return !inPayload_ && headerRead_ == 0; }
  uint64_t messagesRead() const { return messages_; }

 private:
  Mailbox& mailbox_;
  int source_;
  uint8_t header_[kMessageHeaderBytes] = {};
  size_t headerRead_ = 0;
  bool inPayload_ = false;
  bool chunkOpen_ = false;  // a mailbox chunk is between next() and advance()
  uint64_t left_ = 0;       // payload bytes still to come
  std::vector<uint8_t> scratch_;
  uint64_t messages_ = 0;
  std::string failure_;
};

}  // namespace p2p
}  // namespace hora
