// InboundStream (contract in inbound_stream.h): header, payload, header, payload... The header is
// read exactly (never past it), so the first payload byte always lands in the message's own
// destination and never needs a copy.
#include "core/p2p/inbound_stream.h"

#include <algorithm>

#include "core/common/errors.h"

namespace hora {
namespace p2p {
namespace {

// Discarded payload is read through this much memory at a time.
constexpr size_t kScratchBytes = 64 << 10;

}  // namespace

InboundStream::InboundStream(Mailbox& mailbox, int source) : mailbox_(mailbox), source_(source) {}

PayloadChunk InboundStream::next() {
  HORA_CHECK(!failed(), "reading a failed point-to-point stream");
  HORA_CHECK(!chunkOpen_, "next() twice without advance()");
  if (!inPayload_) return {header_ + headerRead_, kMessageHeaderBytes - headerRead_};
  PayloadChunk chunk = mailbox_.beginChunk(source_);
  chunkOpen_ = true;
  if (chunk.data == nullptr) {
    if (scratch_.empty()) scratch_.resize(kScratchBytes);
    chunk.data = scratch_.data();
    chunk.bytes = std::min(chunk.bytes, scratch_.size());
  }
  return chunk;
}

void InboundStream::advance(size_t written) {
  if (inPayload_) {
    HORA_CHECK(chunkOpen_, "advance() without next()");
    chunkOpen_ = false;
    mailbox_.endChunk(source_, written);
    left_ -= written;
    if (left_ == 0) {
      inPayload_ = false;
      ++messages_;
    }
    return;
  }
  HORA_CHECK(written <= kMessageHeaderBytes - headerRead_, "more header bytes than asked for");
  headerRead_ += written;
  if (headerRead_ < kMessageHeaderBytes) return;
  headerRead_ = 0;
  MessageHeader h;
  std::string bad = decodeMessageHeader(header_, &h);
  if (!bad.empty()) {
    failure_ =
        "malformed message header after " + std::to_string(messages_) + " message(s): " + bad;
    return;
  }
  mailbox_.arrive(source_, h.tag, h.length);
  if (h.length == 0) {
    ++messages_;
    return;
  }
  inPayload_ = true;
  left_ = h.length;
}

}  // namespace p2p
}  // namespace hora
