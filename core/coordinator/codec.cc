#include "core/coordinator/codec.h"

#include "core/common/errors.h"
#include "core/common/wire.h"

// Layout: a batch starts with its version byte, then the fields in the order written below; every
// integer is little-endian (core/common/wire.h), vectors and strings carry a u32 count. Fields are
// positional, with no tags: ranks of one job run one build, and the version byte turns a mix of
// builds into a clear error instead of misread fields. Any change to the field order or types
// below must bump the version.
//
// Decoding never trusts a length: WireReader checks every count against the bytes left before it
// allocates, enums are checked against their largest value, and a batch must end exactly where
// its last field does. A malformed batch throws IoError; the background loop treats that like a
// broken connection (the job stops with the error on every pending handle), because a rank that
// misread its instructions cannot be allowed to run collectives out of step with the others.

namespace hora {
namespace {

// Version 2: typed per-kind fields (element counts, gathered rows, splits matrix, process-set
// change) instead of one overloaded size vector; the tuned fusion threshold in response batches.
// Request version 4, response version 3: the heartbeat byte at the end of both.
// Response version 4: each response starts with its form; a cache hit travels as its slots alone.
constexpr uint8_t kRequestBatchVersion = 4;
constexpr uint8_t kResponseBatchVersion = 4;

// How a response travels: in full, or (a cache hit) as the slots every rank rebuilds it from.
enum class ResponseForm : uint8_t { Full = 0, CachedSlots = 1 };
constexpr uint8_t kMaxResponseForm = static_cast<uint8_t>(ResponseForm::CachedSlots);

// Strings in a vector take at least their u32 length each; bounds counts before allocating.
constexpr size_t kMinStringBytes = 4;
constexpr uint8_t kMaxReduceOp = static_cast<uint8_t>(ReduceOp::Product);

void failIfTruncated(const WireReader& rd) {
  if (!rd.ok()) throw IoError("malformed negotiation message: truncated");
}

std::vector<std::string> readStrings(WireReader& rd) {
  uint32_t n = rd.count(kMinStringBytes);
  std::vector<std::string> v;
  v.reserve(n);
  for (uint32_t i = 0; i < n; ++i) v.push_back(rd.str());
  return v;
}

void writeStrings(WireWriter& w, const std::vector<std::string>& v) {
  w.u32(static_cast<uint32_t>(v.size()));
  for (const auto& s : v) w.str(s);
}

// Trailing bytes mean the sender wrote fields this build does not know: as bad as missing ones.
void expectEnd(const WireReader& rd) {
  failIfTruncated(rd);
  if (!rd.atEnd()) throw IoError("malformed negotiation message: trailing bytes");
}

// An enum value from the wire must name a known value: a corrupt byte must not become an
// out-of-range OpKind that later code switches on.
template <typename E>
E checkedEnum(uint8_t v, uint8_t maxValue, const char* what) {
  if (v > maxValue) throw IoError(std::string("malformed negotiation message: bad ") + what);
  return static_cast<E>(v);
}

void writeRequest(WireWriter& w, const Request& r) {
  w.u8(static_cast<uint8_t>(r.kind));
  w.str(r.name);
  w.i32(r.processSetId);
  w.i32(r.rank);
  w.u8(static_cast<uint8_t>(r.dtype));
  w.vec(r.shape);
  w.i32(r.device);
  w.u8(static_cast<uint8_t>(r.reduceOp));
  w.f64(r.prescale);
  w.f64(r.postscale);
  w.i32(r.rootRank);
  w.vec(r.splits);
  w.i32(r.processSet.id);
  w.vec(r.processSet.ranks);
  w.str(r.callSite);
}

Request readRequest(WireReader& rd) {
  Request r;
  r.kind = checkedEnum<OpKind>(rd.u8(), kMaxOpKind, "op kind");
  r.name = rd.str();
  r.processSetId = rd.i32();
  r.rank = rd.i32();
  r.dtype = checkedEnum<DataType>(rd.u8(), kNumDataTypes - 1, "dtype");
  r.shape = rd.vec<int64_t>();
  r.device = rd.i32();
  r.reduceOp = checkedEnum<ReduceOp>(rd.u8(), kMaxReduceOp, "reduce op");
  r.prescale = rd.f64();
  r.postscale = rd.f64();
  r.rootRank = rd.i32();
  r.splits = rd.vec<int32_t>();
  r.processSet.id = rd.i32();
  r.processSet.ranks = rd.vec<int32_t>();
  r.callSite = rd.str();
  return r;
}

// A cache hit's names and fields are in every rank's cache already: at thousands of ranks and
// hundreds of tensors per step, repeating them was most of the bytes rank 0 sends.
void writeResponse(WireWriter& w, const Response& r) {
  if (r.cacheHit) {
    w.u8(static_cast<uint8_t>(ResponseForm::CachedSlots));
    w.i32(r.processSetId);
    w.vec(r.cacheSlots);
    return;
  }
  w.u8(static_cast<uint8_t>(ResponseForm::Full));
  w.u8(static_cast<uint8_t>(r.kind));
  writeStrings(w, r.names);
  w.i32(r.processSetId);
  w.u8(static_cast<uint8_t>(r.dtype));
  w.i32(r.device);
  w.u8(static_cast<uint8_t>(r.reduceOp));
  w.f64(r.prescale);
  w.f64(r.postscale);
  w.i32(r.rootRank);
  w.vec(r.elementCounts);
  w.vec(r.rowElements);
  w.vec(r.gatheredRows);
  w.vec(r.cacheSlots);
  w.vec(r.splitsMatrix);
  w.i32(r.processSet.id);
  w.vec(r.processSet.ranks);
  w.u8(static_cast<uint8_t>(r.errorCode));
  w.str(r.errorMessage);
  w.i32(r.lastJoinedRank);
  w.boolean(r.withJoinedRanks);
}

Response readResponse(WireReader& rd) {
  Response r;
  auto form = checkedEnum<ResponseForm>(rd.u8(), kMaxResponseForm, "response form");
  if (form == ResponseForm::CachedSlots) {
    r.cacheHit = true;
    r.processSetId = rd.i32();
    r.cacheSlots = rd.vec<int32_t>();
    failIfTruncated(rd);
    if (r.cacheSlots.empty())
      throw IoError("malformed negotiation message: a cache hit of no slot");
    return r;
  }
  r.kind = checkedEnum<OpKind>(rd.u8(), kMaxOpKind, "op kind");
  r.names = readStrings(rd);
  r.processSetId = rd.i32();
  r.dtype = checkedEnum<DataType>(rd.u8(), kNumDataTypes - 1, "dtype");
  r.device = rd.i32();
  r.reduceOp = checkedEnum<ReduceOp>(rd.u8(), kMaxReduceOp, "reduce op");
  r.prescale = rd.f64();
  r.postscale = rd.f64();
  r.rootRank = rd.i32();
  r.elementCounts = rd.vec<int64_t>();
  r.rowElements = rd.vec<int64_t>();
  r.gatheredRows = rd.vec<int64_t>();
  r.cacheSlots = rd.vec<int32_t>();
  r.splitsMatrix = rd.vec<int64_t>();
  r.processSet.id = rd.i32();
  r.processSet.ranks = rd.vec<int32_t>();
  r.errorCode = checkedEnum<ResponseError>(rd.u8(), kMaxResponseError, "error code");
  r.errorMessage = rd.str();
  r.lastJoinedRank = rd.i32();
  r.withJoinedRanks = rd.boolean();
  return r;
}

// The fewest bytes one encoded message can take: the encoding of one with every vector and string
// empty. A count is checked against it before anything is decoded, so a batch cannot announce
// more messages than its bytes hold (each decoded message occupies several times its minimal
// encoding in memory).
template <typename M, typename WriteFn>
size_t minEncodedBytes(WriteFn write) {
  WireWriter w;
  write(w, M());
  return w.data().size();
}

uint32_t messageCount(WireReader& rd, size_t minBytesEach, const char* what) {
  uint32_t n = rd.count(minBytesEach);
  if (!rd.ok()) {
    throw IoError(std::string("malformed negotiation message: more ") + what +
                  " announced than its bytes can hold");
  }
  return n;
}

// A batch from another build of Hora: say so rather than misreading its fields.
void expectVersion(WireReader& rd, uint8_t version, const char* what) {
  auto v = rd.u8();
  failIfTruncated(rd);
  if (v != version) {
    throw IoError(std::string("negotiation ") + what + " has version " + std::to_string(v) +
                  ", this build speaks " + std::to_string(version) +
                  ": every rank must run the same Hora build");
  }
}

}  // namespace

std::string encodeRequestBatch(const RequestBatch& b) {
  WireWriter w;
  w.u8(kRequestBatchVersion);
  w.u64(b.appliedBatches);
  w.vec(b.cacheBits);
  w.u32(static_cast<uint32_t>(b.requests.size()));
  for (const auto& r : b.requests) writeRequest(w, r);
  w.boolean(b.shutdown);
  w.boolean(b.waiting);
  w.u8(static_cast<uint8_t>(b.heartbeat));
  return w.take();
}

RequestBatch decodeRequestBatch(const std::string& bytes) {
  WireReader rd(bytes);
  expectVersion(rd, kRequestBatchVersion, "request");
  RequestBatch b;
  b.appliedBatches = rd.u64();
  b.cacheBits = rd.vec<uint64_t>();
  static const size_t kMinRequestBytes = minEncodedBytes<Request>(writeRequest);
  uint32_t n = messageCount(rd, kMinRequestBytes, "requests");
  b.requests.reserve(n);  // n is bounded by the bytes left (messageCount)
  for (uint32_t i = 0; i < n; ++i) b.requests.push_back(readRequest(rd));
  b.shutdown = rd.boolean();
  b.waiting = rd.boolean();
  b.heartbeat = checkedEnum<Heartbeat>(rd.u8(), kMaxHeartbeat, "heartbeat");
  expectEnd(rd);
  return b;
}

std::string encodeResponseBatch(const ResponseBatch& b) {
  WireWriter w;
  w.u8(kResponseBatchVersion);
  w.u64(b.sequence);
  w.vec(b.evictedSlots);
  w.u32(static_cast<uint32_t>(b.responses.size()));
  for (const auto& r : b.responses) writeResponse(w, r);
  w.f64(b.cycleTimeMs);
  w.i64(b.fusionThreshold);
  w.boolean(b.shutdown);
  w.str(b.shutdownReason);
  w.u8(static_cast<uint8_t>(b.heartbeat));
  return w.take();
}

ResponseBatch decodeResponseBatch(const std::string& bytes) {
  WireReader rd(bytes);
  expectVersion(rd, kResponseBatchVersion, "response");
  ResponseBatch b;
  b.sequence = rd.u64();
  b.evictedSlots = rd.vec<int32_t>();
  // The smaller of the two forms: a cache hit of one slot.
  static const size_t kMinResponseBytes = [] {
    Response hit;
    hit.cacheHit = true;
    hit.cacheSlots = {0};
    WireWriter w;
    writeResponse(w, hit);
    return w.data().size();
  }();
  uint32_t n = messageCount(rd, kMinResponseBytes, "responses");
  b.responses.reserve(n);
  for (uint32_t i = 0; i < n; ++i) b.responses.push_back(readResponse(rd));
  b.cycleTimeMs = rd.f64();
  b.fusionThreshold = rd.i64();
  b.shutdown = rd.boolean();
  b.shutdownReason = rd.str();
  b.heartbeat = checkedEnum<Heartbeat>(rd.u8(), kMaxHeartbeat, "heartbeat");
  expectEnd(rd);
  return b;
}

}  // namespace hora
