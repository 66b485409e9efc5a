// libFuzzer target: the connection handshake (core/net/handshake.h) on either side, fed
// fuzzer-chosen messages in fuzzer-chosen pieces.
//
// Input: a mode byte, then for each message the handshake asks for, one split byte and the
// message bytes. Mode bit 0 picks the side (acceptor / connector); bit 1 makes this harness, which
// knows the secret, write the correct proof into each message so the states after
// authentication are reached too; bit 2 makes the acceptor's validator refuse the peer.
//
// Checked: the handshake never asks for more than one message and never crashes; without the
// harness's help no input authenticates (a forged proof passing would abort here).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/common/hmac.h"
#include "core/common/wire.h"
#include "core/net/frame.h"
#include "core/net/handshake.h"

namespace {

using hora::net::Handshake;

const std::string kSecret = "fuzz-secret";
constexpr size_t kHeader = hora::net::kFrameHeaderBytes;
constexpr size_t kNonce = 32;
constexpr size_t kMac = 32;

std::string mac(const std::string& message) {
  hora::Sha256Digest d = hora::hmacSha256(kSecret, message);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

uint32_t le32(const std::string& s, size_t at) {
  hora::WireReader r(s.data() + at, 4);
  return r.u32();
}

// The proofs exactly as the protocol defines them (see the comment at the top of handshake.cc).
void proveHello(std::string& msg, const std::string& nonceA) {
  std::string nonceC = msg.substr(kHeader + 5, kNonce);
  hora::WireWriter w;
  w.str("hora-hello")
      .str(nonceA)
      .u8(static_cast<uint8_t>(msg[kHeader]))
      .u32(le32(msg, kHeader + 1));
  w.str(nonceC);
  msg.replace(kHeader + 5 + kNonce, kMac, mac(w.data()));
}

void proveWelcome(std::string& msg, const std::string& nonceC, const std::string& nonceA) {
  hora::WireWriter w;
  w.str("hora-welcome").str(nonceC).str(nonceA).u8(static_cast<uint8_t>(msg[kHeader]));
  w.u32(le32(msg, kHeader + 1));
  msg.replace(kHeader + 5, kMac, mac(w.data()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  uint8_t mode = in.ConsumeIntegral<uint8_t>();
  bool isAcceptor = (mode & 1) != 0;
  bool prove = (mode & 2) != 0;
  bool refuse = (mode & 4) != 0;
  Handshake hs = isAcceptor
                     ? Handshake::acceptor(kSecret, 0,
                                           [refuse](hora::net::PeerKind, int) {
                                             return refuse ? std::string("refused") : std::string();
                                           })
                     : Handshake::connector(kSecret, hora::net::PeerKind::Data, 1, -1);
  std::vector<std::string> sent;  // every message the handshake wrote
  std::string nonceA, nonceC;
  for (int step = 0; step < 4 && hs.state() == Handshake::State::Running; ++step) {
    while (hs.outputPending() > 0) {
      sent.emplace_back(hs.outputData(), hs.outputPending());
      hs.outputSent(hs.outputPending());
    }
    if (isAcceptor && sent.size() == 1 && sent[0].size() == kHeader + kNonce)
      nonceA = sent[0].substr(kHeader);
    if (!isAcceptor && sent.size() == 1 && sent[0].size() >= kHeader + 5 + kNonce)
      nonceC = sent[0].substr(kHeader + 5, kNonce);
    size_t want = hs.inputWanted();
    if (want == 0 || want > 1024) std::abort();  // one fixed-size message at a time
    size_t split = in.ConsumeIntegral<uint8_t>();
    std::string msg = in.ConsumeBytesAsString(want);
    if (prove && msg.size() == want) {
      if (isAcceptor && want == kHeader + 5 + kNonce + kMac) proveHello(msg, nonceA);
      if (!isAcceptor && want == kHeader + kNonce) nonceA = msg.substr(kHeader);
      if (!isAcceptor && want == kHeader + 5 + kMac) proveWelcome(msg, nonceC, nonceA);
    }
    // Fed in two pieces: a message split across reads must decode the same.
    size_t first = msg.empty() ? 0 : split % (msg.size() + 1);
    hs.input(msg.data(), first);
    if (hs.state() == Handshake::State::Running) hs.input(msg.data() + first, msg.size() - first);
    if (msg.size() < want) break;  // input exhausted mid-message: the handshake just waits
  }
  if (hs.state() == Handshake::State::Done && !prove) std::abort();  // authenticated by a forgery
  if (hs.state() == Handshake::State::Failed && hs.failure().empty()) std::abort();
  return 0;
}
