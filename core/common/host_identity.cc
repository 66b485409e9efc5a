#include "core/common/host_identity.h"

#include <unistd.h>

#include <fstream>

namespace hora {

std::string hostIdentity(const std::string& extra) {
  std::string boot;
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::getline(f, boot);
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  char link[128] = {};
  if (::readlink("/proc/self/ns/net", link, sizeof(link) - 1) < 0) link[0] = 0;
  return boot + "|" + host + "|" + link + (extra.empty() ? "" : "|" + extra);
}

}  // namespace hora
