#include "core/transport/control_channel.h"

#include <exception>

namespace hora {

void ControlChannel::broadcast(const std::string& bytes, bool bestEffort) {
  for (int r = 1; r < size(); ++r) {
    try {
      send(r, bytes);
    } catch (const std::exception&) {
      if (!bestEffort) throw;  // else that rank is gone too
    }
  }
}

}  // namespace hora
