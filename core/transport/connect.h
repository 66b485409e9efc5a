#pragma once
// Connecting a job whose two roles may run on different transports: the controller carries
// negotiation (the ControlChannel), the data transport carries the collectives (the world
// Communicator and its process sets). The roles are chosen with HORA_CONTROLLER and
// HORA_CPU_OPERATIONS.
//
// Contract: connectRoles() is collective over all ranks, like Transport::connect(). When both
// roles name one transport it is that transport's connect(). Otherwise both transports connect,
// in the same order on every rank (MPI first), and the Connection keeps the controller's control
// channel and the data transport's world communicator. The two unused halves are closed
// at once, on every rank, before anything has travelled on them.
#include <string>

#include "core/store/store.h"
#include "core/transport/transport.h"

namespace hora {

// What the runtime reports as its transport: "tcp" or "mpi" when one transport serves both
// roles, else "<controller>+<data>" ("mpi+tcp": negotiation over MPI, collectives over TCP).
std::string transportLabel(const Transport& controller, const Transport& data);

Connection connectRoles(Transport& controller, Transport& data, const ConnectOptions& options,
                        Store& store);

}  // namespace hora
