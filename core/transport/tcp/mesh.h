#pragma once
// Connection set-up of the TCP transport, before any collective runs.
//
//   1. Listen on an ephemeral port of the address this rank advertises (options.listenHost, see
//      net::advertisedHost()), and only there; publish "addr/<rank>" = "host:port" in the store.
//   2. Control plane: a tree (control_tree.h); every rank > 0 opens a connection to its parent
//      (so a rank holds one control connection per child, at most HORA_CONTROL_FANOUT, and one to
//      its parent; up to fanout + 1 ranks, a star around rank 0).
//      Data plane, eager (HORA_TCP_EAGER_MESH=1): one connection per pair of ranks; the higher
//      rank connects to the lower. Lazy (the default): none here; set-up ends once every rank's
//      address is read from the store (looked for in one request for all those still missing,
//      every 50 ms at most, so the listener is served meanwhile), and the
//      links are opened on first use (link_opener.h) through the listener returned here. A data
//      connection from a higher rank that already opens its link while this rank is still in
//      set-up is taken as in the eager mesh.
//   3. Every connection runs the handshake (handshake.h): both ends prove the job secret, and the
//      connector states its rank and the connection kind. A connection that fails it, sends
//      garbage, or claims a rank and kind already connected is dropped with a log line, and set-up
//      carries on waiting for the real peer. Refused or failed outgoing attempts are retried.
//      Incoming connections that have not passed the handshake are capped and time out
//      (net::kMaxPendingHandshakes, net::kHandshakeTimeout).
//
// All of it runs in one poll(2) loop (non-blocking accept, connect and handshakes), bounded by
// options.startTimeout: TimeoutError names the ranks that never published or never connected.
// A store that fails meanwhile (checked every 500 ms while connecting) ends the wait at once with
// an error naming the store's owner and the ranks awaited (rendezvous_store.h).
// The returned sockets are non-blocking and tuned (TCP_NODELAY, large buffers).
#include <vector>

#include "core/net/socket.h"
#include "core/store/store.h"
#include "core/transport/transport.h"

namespace hora {
namespace tcp {

struct MeshSockets {
  std::vector<net::Socket> data;       // by world rank; invalid for this rank and links not made
  std::vector<net::Socket> control;    // by world rank: the parent's and the children's
  net::Socket listener;                // where peers open their links (invalid for one rank)
  std::vector<std::string> addresses;  // every rank's "host:port" ("" unread: eager mesh only)
};

MeshSockets connectMesh(const ConnectOptions& options, Store& store, bool eager);

}  // namespace tcp
}  // namespace hora
