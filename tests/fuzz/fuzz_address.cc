// libFuzzer target: parseHostPort, which reads the "host:port" addresses ranks publish in the
// store (and the store address rank 0 sends over MPI). Malformed text must throw InvalidArgument;
// accepted text must give a port in 1..65535 and a host that joins back to the same text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/common/errors.h"
#include "core/net/socket.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::string host;
  int port = 0;
  try {
    hora::net::parseHostPort(text, &host, &port);
  } catch (const hora::InvalidArgument&) {
    return 0;
  }
  if (port < 1 || port > 65535) std::abort();
  if (text.compare(0, host.size(), host) != 0 || text[host.size()] != ':') std::abort();
  return 0;
}
