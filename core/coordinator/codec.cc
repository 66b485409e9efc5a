#include "core/coordinator/codec.h"

#include <cstring>
#include <type_traits>

#include "core/common/errors.h"

namespace hora {
namespace {

constexpr uint8_t kRequestBatchVersion = 2;
constexpr uint8_t kResponseBatchVersion = 2;

class Writer {
 public:
  template <typename T>
  void pod(T v) {
    static_assert(std::is_trivially_copyable<T>::value, "pod only");
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void str(const std::string& s) {
    pod<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  template <typename T>
  void vec(const std::vector<T>& v) {
    pod<uint32_t>(static_cast<uint32_t>(v.size()));
    if (!v.empty()) out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void strings(const std::vector<std::string>& v) {
    pod<uint32_t>(static_cast<uint32_t>(v.size()));
    for (const auto& s : v) str(s);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : p_(in.data()), end_(in.data() + in.size()) {}

  template <typename T>
  T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  std::string str() {
    auto n = pod<uint32_t>();
    need(n);
    std::string s(p_, n);
    p_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> vec() {
    auto n = pod<uint32_t>();
    need(static_cast<size_t>(n) * sizeof(T));
    std::vector<T> v(n);
    if (n > 0) std::memcpy(v.data(), p_, n * sizeof(T));
    p_ += n * sizeof(T);
    return v;
  }
  std::vector<std::string> strings() {
    auto n = pod<uint32_t>();
    need(n);  // every string takes at least its 4-byte length
    std::vector<std::string> v;
    v.reserve(n);
    for (uint32_t i = 0; i < n; ++i) v.push_back(str());
    return v;
  }
  void expectEnd() const {
    if (p_ != end_) throw IoError("malformed negotiation message: trailing bytes");
  }

 private:
  void need(size_t n) const {
    if (static_cast<size_t>(end_ - p_) < n) throw IoError("malformed negotiation message: truncated");
  }
  const char* p_;
  const char* end_;
};

template <typename E>
E checkedEnum(uint8_t v, uint8_t maxValue, const char* what) {
  if (v > maxValue) throw IoError(std::string("malformed negotiation message: bad ") + what);
  return static_cast<E>(v);
}

void writeRequest(Writer& w, const Request& r) {
  w.pod<uint8_t>(static_cast<uint8_t>(r.kind));
  w.str(r.name);
  w.pod(r.processSetId);
  w.pod(r.rank);
  w.pod<uint8_t>(static_cast<uint8_t>(r.dtype));
  w.vec(r.shape);
  w.pod(r.device);
  w.pod<uint8_t>(static_cast<uint8_t>(r.reduceOp));
  w.pod(r.prescale);
  w.pod(r.postscale);
  w.pod(r.rootRank);
  w.vec(r.splits);
  w.pod(r.processSet.id);
  w.vec(r.processSet.ranks);
  w.str(r.callSite);
}

Request readRequest(Reader& rd) {
  Request r;
  r.kind = checkedEnum<OpKind>(rd.pod<uint8_t>(), 10, "op kind");
  r.name = rd.str();
  r.processSetId = rd.pod<int32_t>();
  r.rank = rd.pod<int32_t>();
  r.dtype = checkedEnum<DataType>(rd.pod<uint8_t>(), kNumDataTypes - 1, "dtype");
  r.shape = rd.vec<int64_t>();
  r.device = rd.pod<int32_t>();
  r.reduceOp = checkedEnum<ReduceOp>(rd.pod<uint8_t>(), 5, "reduce op");
  r.prescale = rd.pod<double>();
  r.postscale = rd.pod<double>();
  r.rootRank = rd.pod<int32_t>();
  r.splits = rd.vec<int32_t>();
  r.processSet.id = rd.pod<int32_t>();
  r.processSet.ranks = rd.vec<int32_t>();
  r.callSite = rd.str();
  return r;
}

void writeResponse(Writer& w, const Response& r) {
  w.pod<uint8_t>(static_cast<uint8_t>(r.kind));
  w.strings(r.names);
  w.pod(r.processSetId);
  w.pod<uint8_t>(static_cast<uint8_t>(r.dtype));
  w.pod(r.device);
  w.pod<uint8_t>(static_cast<uint8_t>(r.reduceOp));
  w.pod(r.prescale);
  w.pod(r.postscale);
  w.pod(r.rootRank);
  w.vec(r.elementCounts);
  w.vec(r.rowElements);
  w.vec(r.gatheredRows);
  w.vec(r.cacheSlots);
  w.vec(r.splitsMatrix);
  w.pod(r.processSet.id);
  w.vec(r.processSet.ranks);
  w.pod<uint8_t>(static_cast<uint8_t>(r.errorCode));
  w.str(r.errorMessage);
  w.pod(r.lastJoinedRank);
  w.pod<uint8_t>(r.withJoinedRanks ? 1 : 0);
}

Response readResponse(Reader& rd) {
  Response r;
  r.kind = checkedEnum<OpKind>(rd.pod<uint8_t>(), 10, "op kind");
  r.names = rd.strings();
  r.processSetId = rd.pod<int32_t>();
  r.dtype = checkedEnum<DataType>(rd.pod<uint8_t>(), kNumDataTypes - 1, "dtype");
  r.device = rd.pod<int32_t>();
  r.reduceOp = checkedEnum<ReduceOp>(rd.pod<uint8_t>(), 5, "reduce op");
  r.prescale = rd.pod<double>();
  r.postscale = rd.pod<double>();
  r.rootRank = rd.pod<int32_t>();
  r.elementCounts = rd.vec<int64_t>();
  r.rowElements = rd.vec<int64_t>();
  r.gatheredRows = rd.vec<int64_t>();
  r.cacheSlots = rd.vec<int32_t>();
  r.splitsMatrix = rd.vec<int64_t>();
  r.processSet.id = rd.pod<int32_t>();
  r.processSet.ranks = rd.vec<int32_t>();
  r.errorCode = checkedEnum<ResponseError>(rd.pod<uint8_t>(), 2, "error code");
  r.errorMessage = rd.str();
  r.lastJoinedRank = rd.pod<int32_t>();
  r.withJoinedRanks = rd.pod<uint8_t>() != 0;
  return r;
}

void expectVersion(Reader& rd, uint8_t version, const char* what) {
  auto v = rd.pod<uint8_t>();
  if (v != version) {
    throw IoError(std::string("negotiation ") + what + " has version " + std::to_string(v) +
                  ", this build speaks " + std::to_string(version) +
                  ": every rank must run the same Hora build");
  }
}

}  // namespace

std::string encodeRequestBatch(const RequestBatch& b) {
  Writer w;
  w.pod(kRequestBatchVersion);
  w.pod(b.appliedBatches);
  w.vec(b.cacheBits);
  w.pod<uint32_t>(static_cast<uint32_t>(b.requests.size()));
  for (const auto& r : b.requests) writeRequest(w, r);
  w.pod<uint8_t>(b.shutdown ? 1 : 0);
  return w.take();
}

RequestBatch decodeRequestBatch(const std::string& bytes) {
  Reader rd(bytes);
  expectVersion(rd, kRequestBatchVersion, "request");
  RequestBatch b;
  b.appliedBatches = rd.pod<uint64_t>();
  b.cacheBits = rd.vec<uint64_t>();
  auto n = rd.pod<uint32_t>();
  for (uint32_t i = 0; i < n; ++i) b.requests.push_back(readRequest(rd));
  b.shutdown = rd.pod<uint8_t>() != 0;
  rd.expectEnd();
  return b;
}

std::string encodeResponseBatch(const ResponseBatch& b) {
  Writer w;
  w.pod(kResponseBatchVersion);
  w.pod(b.sequence);
  w.vec(b.evictedSlots);
  w.pod<uint32_t>(static_cast<uint32_t>(b.responses.size()));
  for (const auto& r : b.responses) writeResponse(w, r);
  w.pod(b.cycleTimeMs);
  w.pod<uint8_t>(b.shutdown ? 1 : 0);
  w.str(b.shutdownReason);
  return w.take();
}

ResponseBatch decodeResponseBatch(const std::string& bytes) {
  Reader rd(bytes);
  expectVersion(rd, kResponseBatchVersion, "response");
  ResponseBatch b;
  b.sequence = rd.pod<uint64_t>();
  b.evictedSlots = rd.vec<int32_t>();
  auto n = rd.pod<uint32_t>();
  for (uint32_t i = 0; i < n; ++i) b.responses.push_back(readResponse(rd));
  b.cycleTimeMs = rd.pod<double>();
  b.shutdown = rd.pod<uint8_t>() != 0;
  b.shutdownReason = rd.str();
  rd.expectEnd();
  return b;
}

}  // namespace hora
