// Writes the seed corpora of the fuzz targets with the engine's own encoders, so the seeds are
// valid messages of the current protocol versions and the fuzzers start from real structure:
//   fuzz_make_corpus tests/fuzz/corpus
// writes <dir>/<target>/<seed name>. Rerun (and commit the result) when a wire format changes.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/coordinator/codec.h"
#include "core/net/frame.h"
#include "core/p2p/message_header.h"
#include "core/store/tcp_store_protocol.h"

namespace {

using hora::WireWriter;
namespace net = hora::net;
namespace proto = hora::store_protocol;

std::string root;

void write(const std::string& target, const std::string& name, const std::string& bytes) {
  std::string dir = root + "/" + target;
  ::mkdir(root.c_str(), 0755);
  ::mkdir(dir.c_str(), 0755);
  std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::fclose(f);
}

hora::Request request(hora::OpKind kind, const std::string& name) {
  hora::Request r;
  r.kind = kind;
  r.name = name;
  r.rank = 1;
  r.shape = {4, 3};
  r.callSite = "train.py:7";
  if (kind == hora::OpKind::Alltoall) r.splits = {1, 3};
  if (kind == hora::OpKind::AddProcessSet) r.processSet.ranks = {0, 1};
  return r;
}

std::vector<hora::RequestBatch> requestBatches() {
  hora::RequestBatch empty;
  hora::RequestBatch several;
  several.appliedBatches = 3;
  several.cacheBits = {0x5};
  several.requests = {request(hora::OpKind::Allreduce, "grad.0"),
                      request(hora::OpKind::Alltoall, "a2a"),
                      request(hora::OpKind::AddProcessSet, "")};
  hora::RequestBatch bye;
  bye.shutdown = true;
  hora::RequestBatch ping;
  ping.appliedBatches = 7;
  ping.heartbeat = hora::Heartbeat::Ping;
  return {empty, several, bye, ping};
}

std::vector<hora::ResponseBatch> responseBatches() {
  hora::ResponseBatch empty;
  hora::ResponseBatch fused;
  fused.sequence = 9;
  fused.evictedSlots = {2};
  hora::Response allreduce;
  allreduce.names = {"grad.0", "grad.1"};
  allreduce.elementCounts = {12, 5};
  allreduce.cacheSlots = {0, 1};
  hora::Response allgather;
  allgather.kind = hora::OpKind::Allgather;
  allgather.names = {"g"};
  allgather.rowElements = {3};
  allgather.gatheredRows = {4, 2};
  hora::Response error;
  error.kind = hora::OpKind::Error;
  error.names = {"bad"};
  error.errorCode = hora::ResponseError::Mismatch;
  error.errorMessage = "shapes differ";
  hora::Response hit;  // travels as its slots alone
  hit.names = {"grad.2", "grad.3"};
  hit.elementCounts = {8, 8};
  hit.cacheSlots = {3, 4};
  hit.cacheHit = true;
  fused.responses = {allreduce, allgather, error, hit};
  fused.cycleTimeMs = 2.5;
  fused.fusionThreshold = 1 << 20;
  hora::ResponseBatch bye;
  bye.shutdown = true;
  bye.shutdownReason = "rank 1 failed";
  hora::ResponseBatch pong;
  pong.heartbeat = hora::Heartbeat::Pong;
  return {empty, fused, bye, pong};
}

std::string storeFrame(uint16_t type, const std::string& payload) {
  return net::buildFrame(net::kStoreMagic, type, payload);
}

std::string keys(const std::vector<std::string>& ks) {
  WireWriter w;
  w.u32(static_cast<uint32_t>(ks.size()));
  for (const auto& k : ks) w.str(k);
  return w.take();
}

std::string handshakeFrame(uint16_t type, const std::string& payload) {
  return net::buildFrame(net::kHandshakeMagic, type, payload);
}

std::string p2pHeader(int64_t tag, uint64_t length) {
  hora::p2p::MessageHeader h;
  h.tag = tag;
  h.length = length;
  std::string out(hora::p2p::kMessageHeaderBytes, '\0');
  hora::p2p::encodeMessageHeader(h, reinterpret_cast<uint8_t*>(&out[0]));
  return out;
}

// A receive posted before the stream (see fuzz_p2p_stream.cc): tag byte, then u16 size.
std::string early(uint8_t tagByte, uint16_t bytes) {
  return std::string(1, static_cast<char>(tagByte)) + WireWriter().u16(bytes).take();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  root = argv[1];

  int i = 0;
  std::string controlStream;
  for (const auto& b : requestBatches()) {
    std::string bytes = hora::encodeRequestBatch(b);
    write("request_batch", "seed" + std::to_string(i++), bytes);
    controlStream += net::buildFrame(net::kControlMagic, 1, bytes);
  }
  i = 0;
  for (const auto& b : responseBatches()) {
    std::string bytes = hora::encodeResponseBatch(b);
    write("response_batch", "seed" + std::to_string(i++), bytes);
    write("control_frames", "response" + std::to_string(i),
          net::buildFrame(net::kControlMagic, 1, bytes));
  }
  write("control_frames", "requests", controlStream);
  write("control_frames", "partial", controlStream.substr(0, controlStream.size() - 3));
  // The control tree's relayed frames: routed (a rank, then the message) and subtree.
  std::string routed = WireWriter().u32(2).take() + "to rank 2";
  write("control_frames", "relayed",
        net::buildFrame(net::kControlMagic, 2, routed) +
            net::buildFrame(net::kControlMagic, 3, "to every rank below"));

  // Store requests, one protocol conversation per seed.
  std::string setGet = storeFrame(proto::kSet, WireWriter().str("k").str("v").take()) +
                       storeFrame(proto::kGet, WireWriter().u64(0).str("k").take());
  write("store_server", "set_get", setGet);
  write("store_server", "add_check",
        storeFrame(proto::kAdd, WireWriter().str("n").i64(5).take()) +
            storeFrame(proto::kAdd, WireWriter().str("n").i64(-2).take()) +
            storeFrame(proto::kCheck, keys({"n", "k"})));
  write("store_server", "wait_parked",
        storeFrame(proto::kWait, WireWriter().u64(50).take() + keys({"never"})) +
            storeFrame(proto::kSet, WireWriter().str("x").str("y").take()));
  write("store_server", "get_missing",
        storeFrame(proto::kGet, WireWriter().u64(1).str("m").take()));
  write("store_server", "get_many",
        storeFrame(proto::kSet, WireWriter().str("k").str("v").take()) +
            storeFrame(proto::kGetMany, WireWriter().u64(0).take() + keys({"k"})));

  // Store replies: the client call to make (see fuzz_store_client.cc), then the reply.
  auto reply = [](char op, uint16_t type, const std::string& payload) {
    return std::string(1, op) + storeFrame(type, payload);
  };
  write("store_client", "set_ok", reply(0, proto::kOk, ""));
  write("store_client", "get_value", reply(1, proto::kValue, WireWriter().str("v").take()));
  write("store_client", "get_timed_out",
        reply(1, proto::kTimedOut, WireWriter().u64(10).take() + keys({"k"})));
  write("store_client", "add_counter", reply(2, proto::kCounter, WireWriter().i64(5).take()));
  write("store_client", "add_error", reply(2, proto::kError, WireWriter().str("no int").take()));
  write("store_client", "check_bool", reply(3, proto::kBool, WireWriter().u8(1).take()));
  write("store_client", "wait_ok", reply(4, proto::kOk, ""));
  write("store_client", "get_many_values",
        reply(5, proto::kValues, WireWriter().u32(2).u8(1).str("v").u8(0).str("").take()));
  // Regression: a header announcing 48 MiB with one byte behind it (the client once allocated the
  // announced length before reading; fuzz_store_client runs with a 16 MiB allocation limit).
  net::FrameHeader big;
  big.magic = net::kStoreMagic;
  big.type = proto::kValue;
  big.length = 48u << 20;
  uint8_t header[net::kFrameHeaderBytes];
  net::encodeHeader(big, header);
  write("store_client", "regress_announced_length",
        std::string(1, 1) + std::string(reinterpret_cast<char*>(header), sizeof(header)) + "v");

  // Handshake: mode byte, then a split byte and one message per step (see fuzz_handshake.cc).
  std::string hello = handshakeFrame(2, WireWriter().u8(2).u32(1).take() + std::string(64, 'h'));
  std::string challenge = handshakeFrame(1, std::string(32, 'c'));
  std::string welcome = handshakeFrame(3, WireWriter().u8(0).u32(0).take() + std::string(32, 'w'));
  std::string refusal = handshakeFrame(3, WireWriter().u8(2).u32(0).take() + std::string(32, '\0'));
  for (uint8_t mode : {1, 3, 7}) {
    write("handshake", "acceptor" + std::to_string(mode),
          std::string(1, static_cast<char>(mode)) + '\x05' + hello);
  }
  for (uint8_t mode : {0, 2}) {
    std::string prefix = std::string(1, static_cast<char>(mode)) + '\x07' + challenge + '\x20';
    write("handshake", "connector" + std::to_string(mode), prefix + welcome);
    write("handshake", "refused" + std::to_string(mode), prefix + refusal);
  }

  // WireReader: a count byte, that many operation bytes, then the payload.
  write("wire", "strings", std::string("\x04\x07\x07\x08\x09", 5) + keys({"ab", "cde"}));
  write("wire", "ints", std::string("\x06\x00\x01\x02\x03\x04\x06", 7) + std::string(40, '\x11'));

  // Point-to-point stream: mode byte, piece-size byte, early receives, then the stream.
  std::string three = p2pHeader(1, 3) + "abc" + p2pHeader(2, 0) + p2pHeader(1, 5) + "defgh";
  write("p2p_stream", "messages", std::string("\x00\x07", 2) + three);
  write("p2p_stream", "posted_first",
        std::string("\x02\x05", 2) + early(1, 3) + early(0x82, 0) + three);
  write("p2p_stream", "size_mismatch",
        std::string("\x01\x03", 2) + early(1, 4) + p2pHeader(1, 3) + "abc" + p2pHeader(1, 4) +
            "wxyz");
  write("p2p_stream", "withdrawn_half",
        std::string("\x0d\x02", 2) + early(3, 10) + p2pHeader(3, 10) + "01234");
  write("p2p_stream", "bad_magic",
        std::string("\x08\x10", 2) + p2pHeader(1, 2) + "ok" + std::string(24, 'Z'));
  write("p2p_stream", "huge_length",
        std::string("\x00\x00", 2) + p2pHeader(0, uint64_t(1) << 40) + std::string(100, 'h'));

  write("address", "ipv4", "127.0.0.1:29500");
  write("address", "name", "node-3.cluster:1");
  write("address", "empty_host", ":80");
  return 0;
}
