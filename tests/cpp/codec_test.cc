#include <gtest/gtest.h>

#include "core/common/errors.h"
#include "core/common/wire.h"
#include "core/coordinator/codec.h"

namespace hora {
namespace {

Request sampleRequest() {
  Request r;
  r.kind = OpKind::Alltoall;
  r.name = "alltoall.layer.3";
  r.processSetId = 2;
  r.rank = 5;
  r.dtype = DataType::BFloat16;
  r.shape = {7, 3, 0};
  r.reduceOp = ReduceOp::Max;
  r.prescale = 0.5;
  r.postscale = 3.25;
  r.rootRank = 1;
  r.splits = {1, 2, 4};
  r.processSet.id = 6;
  r.processSet.ranks = {0, 3};
  r.callSite = "train.py:42";
  return r;
}

TEST(Codec, RequestBatchRoundTrips) {
  RequestBatch b;
  b.appliedBatches = 123456789012ull;
  b.cacheBits = {0x1ull, 0x8000000000000000ull};
  b.requests = {sampleRequest(), Request()};
  b.shutdown = true;
  RequestBatch d = decodeRequestBatch(encodeRequestBatch(b));
  EXPECT_EQ(d.appliedBatches, b.appliedBatches);
  EXPECT_EQ(d.cacheBits, b.cacheBits);
  ASSERT_EQ(d.requests.size(), 2u);
  const Request& r = d.requests[0];
  EXPECT_TRUE(r.sameParams(sampleRequest()));
  EXPECT_EQ(r.name, "alltoall.layer.3");
  EXPECT_EQ(r.rank, 5);
  EXPECT_EQ(r.callSite, "train.py:42");
  EXPECT_TRUE(d.shutdown);
}

TEST(Codec, ResponseBatchRoundTrips) {
  ResponseBatch b;
  b.sequence = 77;
  b.evictedSlots = {3, 9};
  Response r;
  r.kind = OpKind::Allgather;
  r.names = {"a", "b"};
  r.processSetId = 1;
  r.dtype = DataType::Float16;
  r.elementCounts = {7, 8};
  r.rowElements = {5, 6};
  r.gatheredRows = {1, 2, 3, 4};
  r.splitsMatrix = {9, 10, 11, 12};
  r.processSet.id = 4;
  r.processSet.ranks = {1, 2};
  r.cacheSlots = {0, -1};
  r.errorCode = ResponseError::Mismatch;
  r.errorMessage = "nope";
  r.lastJoinedRank = 3;
  r.withJoinedRanks = true;
  b.responses = {r};
  b.shutdown = true;
  b.shutdownReason = "bye";
  b.cycleTimeMs = 2.5;
  b.fusionThreshold = 1 << 22;
  ResponseBatch d = decodeResponseBatch(encodeResponseBatch(b));
  EXPECT_EQ(d.sequence, 77u);
  EXPECT_EQ(d.evictedSlots, b.evictedSlots);
  ASSERT_EQ(d.responses.size(), 1u);
  const Response& x = d.responses[0];
  EXPECT_EQ(x.kind, OpKind::Allgather);
  EXPECT_EQ(x.names, r.names);
  EXPECT_EQ(x.dtype, DataType::Float16);
  EXPECT_EQ(x.elementCounts, r.elementCounts);
  EXPECT_EQ(x.rowElements, r.rowElements);
  EXPECT_EQ(x.gatheredRows, r.gatheredRows);
  EXPECT_EQ(x.splitsMatrix, r.splitsMatrix);
  EXPECT_EQ(x.processSet, r.processSet);
  EXPECT_EQ(x.cacheSlots, r.cacheSlots);
  EXPECT_EQ(x.errorCode, ResponseError::Mismatch);
  EXPECT_EQ(x.errorMessage, "nope");
  EXPECT_EQ(x.lastJoinedRank, 3);
  EXPECT_TRUE(x.withJoinedRanks);
  EXPECT_EQ(d.shutdownReason, "bye");
  EXPECT_EQ(d.cycleTimeMs, 2.5);
  EXPECT_EQ(d.fusionThreshold, 1 << 22);
}

// A cache hit travels as its slots alone; everything else about it is in every rank's cache.
// A response with a new tensor among hits travels in full.
TEST(Codec, CacheHitsTravelAsTheirSlotsAlone) {
  Response hit;
  hit.names = {"layer1.weight", "layer1.bias"};
  hit.elementCounts = {1024, 32};
  hit.cacheSlots = {4, 9};
  hit.processSetId = 3;
  hit.cacheHit = true;
  Response mixed = hit;
  mixed.cacheHit = false;
  ResponseBatch b;
  b.responses = {hit, mixed};
  ResponseBatch d = decodeResponseBatch(encodeResponseBatch(b));
  ASSERT_EQ(d.responses.size(), 2u);
  EXPECT_TRUE(d.responses[0].slotsOnly());
  EXPECT_TRUE(d.responses[0].names.empty());
  EXPECT_TRUE(d.responses[0].elementCounts.empty());
  EXPECT_EQ(d.responses[0].cacheSlots, hit.cacheSlots);
  EXPECT_EQ(d.responses[0].processSetId, 3);
  EXPECT_FALSE(d.responses[1].slotsOnly());
  EXPECT_EQ(d.responses[1].names, mixed.names);
  EXPECT_EQ(d.responses[1].elementCounts, mixed.elementCounts);
  EXPECT_EQ(d.responses[1].cacheSlots, mixed.cacheSlots);
  // A batch of the smallest hits (one slot each) decodes: the count bound allows for them.
  ResponseBatch small;
  hit.cacheSlots = {0};
  small.responses.assign(5, hit);
  EXPECT_EQ(decodeResponseBatch(encodeResponseBatch(small)).responses.size(), 5u);
  // A hit of no slot, or a form this build does not know, is a malformed message.
  ResponseBatch none;
  hit.cacheSlots = {7};
  none.responses = {hit};
  std::string bytes = encodeResponseBatch(none);
  std::string noSlot = bytes;
  // version, sequence, evictions, count, form, process set
  const size_t slotCount = 1 + 8 + 4 + 4 + 1 + 4;
  ASSERT_EQ(static_cast<uint8_t>(noSlot[slotCount]), 1u);
  noSlot[slotCount] = 0;
  noSlot.erase(slotCount + 4, 4);
  EXPECT_THROW(decodeResponseBatch(noSlot), IoError);
  std::string unknownForm = bytes;
  unknownForm[slotCount - 5] = 2;
  EXPECT_THROW(decodeResponseBatch(unknownForm), IoError);
}

TEST(Codec, HeartbeatsRoundTripAndUnknownKindsAreRefused) {
  RequestBatch ping;
  ping.heartbeat = Heartbeat::Ping;
  EXPECT_EQ(decodeRequestBatch(encodeRequestBatch(ping)).heartbeat, Heartbeat::Ping);
  EXPECT_EQ(decodeRequestBatch(encodeRequestBatch(RequestBatch{})).heartbeat, Heartbeat::None);
  ResponseBatch pong;
  pong.heartbeat = Heartbeat::Pong;
  EXPECT_EQ(decodeResponseBatch(encodeResponseBatch(pong)).heartbeat, Heartbeat::Pong);
  // The heartbeat byte ends both batches; a value past Pong is a corrupt or foreign message.
  std::string request = encodeRequestBatch(ping);
  request.back() = 3;
  EXPECT_THROW(decodeRequestBatch(request), IoError);
  std::string response = encodeResponseBatch(pong);
  response.back() = 3;
  EXPECT_THROW(decodeResponseBatch(response), IoError);
}

TEST(Codec, IntegersAreLittleEndianOnTheWire) {
  RequestBatch b;
  b.appliedBatches = 0x0102030405060708ull;
  std::string bytes = encodeRequestBatch(b);
  ASSERT_GE(bytes.size(), 9u);
  // Byte 0 is the version; the u64 follows, least significant byte first on every host.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(static_cast<uint8_t>(bytes[1 + i]), 8 - i) << "byte " << i;
}

TEST(Codec, TruncatedOrCorruptMessagesThrowIoError) {
  RequestBatch b;
  b.requests = {sampleRequest()};
  std::string bytes = encodeRequestBatch(b);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    EXPECT_THROW(decodeRequestBatch(bytes.substr(0, cut)), IoError) << "cut at " << cut;
  }
  EXPECT_THROW(decodeRequestBatch(bytes + "x"), IoError);
  std::string badVersion = bytes;
  badVersion[0] = 99;
  EXPECT_THROW(decodeRequestBatch(badVersion), IoError);
  // A huge length prefix must not allocate or read past the end.
  std::string huge = bytes.substr(0, 9) + std::string("\xff\xff\xff\x7f", 4);
  EXPECT_THROW(decodeRequestBatch(huge), IoError);
}

// A batch announcing more messages than its bytes can hold is refused on the count alone, before
// any message is decoded: each decoded message takes several times its encoded size in memory,
// so a count bounded only by one byte per message would let a small frame allocate gigabytes.
TEST(Codec, MoreMessagesAnnouncedThanTheBytesHoldAreRefusedUpFront) {
  const uint32_t n = 64;
  // n bytes follow the count: enough for n one-byte messages, not for n real ones. Each byte is
  // an invalid op kind, which a decoder that started on the messages would report instead.
  // The version bytes come from the encoders, so the count check is what refuses these batches.
  const uint8_t requestVersion = static_cast<uint8_t>(encodeRequestBatch(RequestBatch{})[0]);
  const uint8_t responseVersion = static_cast<uint8_t>(encodeResponseBatch(ResponseBatch{})[0]);
  std::string requests =
      WireWriter().u8(requestVersion).u64(0).u32(0).u32(n).take() + std::string(n, '\xff');
  try {
    decodeRequestBatch(requests);
    FAIL() << "decoded a request batch that cannot hold its count";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("more requests announced"), std::string::npos) << e.what();
  }
  std::string responses =
      WireWriter().u8(responseVersion).u64(0).u32(0).u32(n).take() + std::string(n, '\xff');
  try {
    decodeResponseBatch(responses);
    FAIL() << "decoded a response batch that cannot hold its count";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("more responses announced"), std::string::npos)
        << e.what();
  }
}

// The bound on counts is the smallest real message: batches of nothing but minimal messages
// (every vector and string empty) still decode.
TEST(Codec, BatchesOfMinimalMessagesDecode) {
  RequestBatch rb;
  rb.requests.resize(5);
  EXPECT_EQ(decodeRequestBatch(encodeRequestBatch(rb)).requests.size(), 5u);
  ResponseBatch sb;
  sb.responses.resize(5);
  EXPECT_EQ(decodeResponseBatch(encodeResponseBatch(sb)).responses.size(), 5u);
}

}  // namespace
}  // namespace hora
