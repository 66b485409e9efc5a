#pragma once
// Which machine, and which network namespace on it, this process runs on. Two processes with
// equal identities share the kernel (so shared memory and abstract Unix sockets reach each other)
// and the loopback interface (so a listener on 127.0.0.1 reaches them both).
#include <string>

namespace hora {

// "<boot id>|<host name>|<network namespace>", with "|<extra>" appended when extra is not empty
// (the launcher's host name under HORA_SHM_HOST_BY_NAME, a testing aid: ranks that horarun places
// on two names of one machine then count as two hosts).
std::string hostIdentity(const std::string& extra = "");

}  // namespace hora
