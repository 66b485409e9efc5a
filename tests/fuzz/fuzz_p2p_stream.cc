// libFuzzer target: the bytes a point-to-point peer sends after the handshake (message headers and
// payloads, core/p2p/message_header.h), read by the channel's stream reader (InboundStream) into
// its mailbox, with receives posted before, during and after, exactly as the I/O thread does it
// but without a socket.
//
// Input: a mode byte, a piece-size byte, then per receive posted before the stream a tag byte
// (bits 0-1: the tag; bit 7: from any source) and a u16 size, then the stream itself, fed in
// pieces of the piece size. Mode bits 0-1: how many receives to post first; bit 2: withdraw the
// receives still pending after the stream; bit 3: the peer hangs up at the end.
//
// Checked, against the harness's own walk over the stream: the stream fails exactly at the first
// header that does not decode; every decoded header re-encodes to the same bytes; each message
// goes to the oldest matching receive (a size mismatch fails it with InvalidArgument and consumes
// the message) or waits, whole and unchanged, for a later receive; withdrawn receives give their
// message back; after a hang-up every pending receive has failed with IoError. Allocations stay
// bounded by the bytes that arrived (run_fuzzer.sh's allocation limit), whatever a length claims.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/common/errors.h"
#include "core/p2p/inbound_stream.h"
#include "core/p2p/mailbox.h"
#include "core/p2p/message_header.h"

namespace {

namespace p2p = hora::p2p;

[[noreturn]] void fail(const char* why) {
  std::fprintf(stderr, "fuzz_p2p_stream: %s\n", why);
  std::abort();
}

struct Slot {
  Slot(size_t bytes, int source, int64_t tag)
      : buffer(bytes, '\0'), r(&buffer[0], bytes, source, tag) {}
  std::string buffer;
  p2p::Receive r;
  // What the harness expects of it.
  enum class Expect { Pending, Received, SizeMismatch, Withdrawn } expect = Expect::Pending;
  std::string payload;
};

// One message as the harness reads the stream.
struct Message {
  int64_t tag = 0;
  uint64_t length = 0;
  std::string payload;  // what of it is in the stream
  bool complete = false;
  Slot* taker = nullptr;  // the receive posted before that takes it
};

bool failedWith(const p2p::Receive& r, hora::ErrorCode code) {
  try {
    r.result();
  } catch (const hora::Error& e) {
    return e.code() == code;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  uint8_t mode = data[0];
  size_t piece = data[1] == 0 ? 256 : data[1];
  size_t at = 2;
  p2p::Mailbox mailbox(0, 2);
  std::vector<std::unique_ptr<Slot>> early;
  for (int i = 0; i < (mode & 3) && at + 3 <= size; ++i, at += 3) {
    int source = (data[at] & 0x80) ? p2p::kAnySource : 1;
    size_t bytes = data[at + 1] | (static_cast<size_t>(data[at + 2]) << 8);
    early.push_back(std::make_unique<Slot>(bytes, source, data[at] & 3));
    mailbox.post(early.back()->r);
    if (mailbox.test(early.back()->r)) fail("a receive completed before anything arrived");
  }
  const uint8_t* stream = data + at;
  size_t streamBytes = size - at;

  // The harness's own walk: the messages, and where the stream must fail.
  std::vector<Message> messages;
  bool expectFailure = false;
  for (size_t pos = 0; pos + p2p::kMessageHeaderBytes <= streamBytes;) {
    p2p::MessageHeader h;
    if (!p2p::decodeMessageHeader(stream + pos, &h).empty()) {
      expectFailure = true;
      break;
    }
    uint8_t again[p2p::kMessageHeaderBytes];
    p2p::encodeMessageHeader(h, again);
    if (std::memcmp(again, stream + pos, sizeof(again)) != 0) fail("a header did not re-encode");
    pos += p2p::kMessageHeaderBytes;
    Message m;
    m.tag = h.tag;
    m.length = h.length;
    size_t have = static_cast<size_t>(std::min<uint64_t>(h.length, streamBytes - pos));
    m.payload.assign(reinterpret_cast<const char*>(stream + pos), have);
    m.complete = have == h.length;
    pos += have;
    messages.push_back(std::move(m));
  }
  // Which early receive takes which message: the oldest pending one with the tag.
  for (auto& m : messages) {
    for (auto& s : early) {
      if (s->expect != Slot::Expect::Pending || s->r.tag() != m.tag) continue;
      m.taker = s.get();
      if (s->r.bytes() != m.length) {
        s->expect = Slot::Expect::SizeMismatch;
      } else if (m.complete) {
        s->expect = Slot::Expect::Received;
        s->payload = m.payload;
      }
      break;
    }
  }

  p2p::InboundStream reader(mailbox, 1);
  for (size_t pos = 0; pos < streamBytes && !reader.failed();) {
    p2p::PayloadChunk c = reader.next();
    size_t n = std::min({c.bytes, piece, streamBytes - pos});
    std::memcpy(c.data, stream + pos, n);
    pos += n;
    reader.advance(n);
  }
  if (reader.failed() != expectFailure) fail("the stream failed where the headers were fine");
  if (reader.failed() && reader.failure().empty()) fail("a failure without a reason");

  for (auto& s : early) {
    bool done = mailbox.test(s->r);
    switch (s->expect) {
      case Slot::Expect::Pending:
        if (done) fail("an early receive completed without its message");
        break;
      case Slot::Expect::Received:
        if (!done || s->r.result() != 1 || s->buffer != s->payload) fail("early receive differs");
        break;
      case Slot::Expect::SizeMismatch:
        if (!done || !failedWith(s->r, hora::ErrorCode::InvalidArgument)) {
          fail("a size mismatch did not fail the receive");
        }
        break;
      case Slot::Expect::Withdrawn: break;
    }
  }
  // A withdrawn receive gives its half-arrived message back.
  if (mode & 4) {
    for (auto& s : early) {
      if (s->expect != Slot::Expect::Pending) continue;
      if (!mailbox.withdraw(s->r)) fail("a pending receive could not be withdrawn");
      for (auto& m : messages) {
        if (m.taker == s.get()) m.taker = nullptr;
      }
      s->expect = Slot::Expect::Withdrawn;
    }
  }
  // Every complete message nobody took waits, unchanged and in order, for a later receive.
  for (auto& m : messages) {
    if (m.taker != nullptr || !m.complete) continue;
    Slot late(m.payload.size(), 1, m.tag);
    mailbox.post(late.r);
    if (!mailbox.test(late.r)) fail("an arrived message was not there for its receive");
    if (late.r.result() != 1 || late.buffer != m.payload) fail("a kept message changed");
  }
  if (mode & 8) {
    mailbox.peerLost(1, "rank 1 closed its point-to-point connection (fuzz)");
    for (auto& s : early) {
      if (s->expect == Slot::Expect::Pending &&
          !(mailbox.test(s->r) && failedWith(s->r, hora::ErrorCode::Io))) {
        fail("a receive from a lost peer is still pending");
      }
    }
    if (mailbox.unexpectedMessages() != 0) fail("a cut-off message was kept");
  }
  for (auto& s : early) {
    if (s->expect != Slot::Expect::Withdrawn && !mailbox.test(s->r)) mailbox.withdraw(s->r);
  }
  return 0;
}
