#include "core/transport/communicator.h"

#include "core/common/errors.h"

namespace hora {

void Communicator::notSupported(const char* op) const {
  throw NotSupported("backend " + backendName() + " does not support " + op);
}

Capabilities Communicator::capabilities() const { return Capabilities::cpuComplete(); }

void Communicator::allreduce(void*, size_t, DataType, ReduceOp) { notSupported("allreduce"); }
bool Communicator::reducesPieces(size_t, DataType, ReduceOp) const { return false; }
void Communicator::allreducePieces(const std::vector<BufferPiece>&, size_t, DataType, ReduceOp) {
  notSupported("allreduce of pieces");
}
void Communicator::allgatherv(const void*, void*, const std::vector<size_t>&) {
  notSupported("allgatherv");
}
void Communicator::broadcast(void*, size_t, int) { notSupported("broadcast"); }
void Communicator::alltoallv(const void*, const std::vector<size_t>&, void*,
                             const std::vector<size_t>&) {
  notSupported("alltoallv");
}
void Communicator::reduceScatter(const void*, void*, const std::vector<size_t>&, DataType,
                                 ReduceOp) {
  notSupported("reducescatter");
}
void Communicator::barrier() { notSupported("barrier"); }
void Communicator::sendRecv(int, const void*, size_t, int, void*, size_t) {
  notSupported("sendrecv");
}

}  // namespace hora
