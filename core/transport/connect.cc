#include "core/transport/connect.h"

namespace hora {

std::string transportLabel(const Transport& controller, const Transport& data) {
  if (controller.name() == data.name()) return data.name();
  return controller.name() + "+" + data.name();
}

Connection connectRoles(Transport& controller, Transport& data, const ConnectOptions& options,
                        Store& store) {
  if (controller.name() == data.name()) return data.connect(options, store);
  // Each transport connects in full (its connect() is the only collective way in), and the half
  // it does not serve is dropped when these go out of scope. MPI goes first: its set-up cannot
  // time out, so a rank whose TCP set-up fails afterwards leaves no peer stuck inside MPI (they
  // time out in the TCP set-up too).
  Connection forControl, forData;
  if (controller.name() == "mpi") {
    forControl = controller.connect(options, store);
    forData = data.connect(options, store);
  } else {
    forData = data.connect(options, store);
    forControl = controller.connect(options, store);
  }
  Connection c;
  c.control = std::move(forControl.control);
  c.world = std::move(forData.world);
  return c;
}

}  // namespace hora
