#include "core/transport/tcp/mesh.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/net/handshake.h"
#include "core/transport/rendezvous_store.h"
#include "core/transport/tcp/control_tree.h"

namespace hora {
namespace tcp {
namespace {

// Outgoing attempts back off exponentially from 20 ms to 500 ms: a peer that is still starting is
// found quickly, and one that is slow does not have its listener hammered.
constexpr Millis kFirstRetry{20};
constexpr Millis kMaxRetry{500};
// How often a rank waiting for its peers checks that the rendezvous store is still there: a
// launcher that stops the store (an elastic driver replacing this generation of the job, or a
// launcher that died), or rank 0 serving it that exits, ends the wait now instead of at the start
// timeout.
constexpr Millis kStoreCheckInterval{500};
// How often a lazy set-up looks for the addresses still missing, at first and at most: the ranks
// publish within milliseconds of each other when they start together.
constexpr Millis kFirstAddressPoll{5};
constexpr Millis kMaxAddressPoll{50};

std::string addressKey(int rank) { return "addr/" + std::to_string(rank); }
// Lazy set-up: rank 0's verdict once every control connection is in ("ok"), or why not ("!...").
// The other ranks wait for it, because no other rank connects to them at start: without it, a
// rank that died after publishing its address would fail only rank 0 here, and the rest later,
// naming rank 0 (whose store ended with its process) instead of the rank that died.
const char* const kStartedKey = "tcp/started";
// How long past its own deadline a rank waits for rank 0's verdict (rank 0 may have started later).
constexpr Millis kVerdictGrace{3000};
// Lazy set-up in a control tree that is not a star: each relay's word that its children connected
// ("ok") or why not ("!..."), which rank 0 awaits before its verdict, so that a rank missing below
// a relay fails every rank at set-up, as a rank missing below rank 0 does. Rank 0 gives up on them
// halfway through the grace, so its verdict still reaches the others in time.
std::string subtreeKey(int rank) { return "tcp/subtree/" + std::to_string(rank); }

// How an outgoing attempt failed: refused or reset connections are routine while peers start;
// a handshake that rejected the secret or the rank is worth a warning.
enum class Setback { Routine, Rejected };

// A connection this rank must open.
struct Target {
  int rank = -1;
  net::PeerKind kind = net::PeerKind::Data;
  std::string host;
  int port = 0;
  bool done = false;
  bool active = false;  // an attempt is in flight
  Clock::time_point retryAt;
  Millis backoff = kFirstRetry;
  std::string lastError;
};

// One connection being set up, in either direction.
struct Attempt {
  Attempt(net::Socket s, net::Handshake h) : sock(std::move(s)), hs(std::move(h)) {}
  net::Socket sock;
  net::Handshake hs;
  Target* target = nullptr;  // outgoing attempts only
  bool connecting = false;   // non-blocking connect not yet complete
  bool claimed = false;      // incoming: passed validation, owns its (kind, rank) slot
  Clock::time_point handshakeDeadline = Clock::time_point::max();  // incoming only
  std::string peer;
  bool dead = false;
};

class MeshBuilder {
 public:
  MeshBuilder(const ConnectOptions& options, Store& store, bool eager)
      : o_(options),
        store_(store),
        eager_(eager),
        tree_(options.size, options.controlFanout),
        children_(tree_.children(options.rank)),
        deadline_(Clock::now() + options.startTimeout) {
    mesh_.data.resize(o_.size);
    mesh_.control.resize(o_.size);
    mesh_.addresses.resize(o_.size);
    claimedData_.assign(o_.size, false);
    claimedControl_.assign(o_.size, false);
  }

  MeshSockets build();

 private:
  void publish();
  void hearVerdict();
  void awaitSubtrees();
  void resolveTargets();
  void startDue(Clock::time_point now);
  void pump(Attempt& a);
  void finish(Attempt& a);
  void abandon(Attempt& a, const std::string& why, Setback setback);
  bool pendingIncoming(const Attempt& a) const;
  void evictOldestPending();
  void expirePending(Clock::time_point now);
  std::string validate(net::PeerKind kind, int rank);
  bool complete() const;
  std::vector<int> missingRanks(std::string* details = nullptr) const;
  [[noreturn]] void timedOut();
  void checkStore(Clock::time_point now);
  void pollAddresses(Clock::time_point now);
  bool addressesKnown() const { return eager_ || addressesFound_ == o_.size; }
  std::string doing() const;
  std::string me() const { return "rank " + std::to_string(o_.rank); }

  const ConnectOptions& o_;
  Store& store_;
  const bool eager_;
  const ControlTree tree_;
  const std::vector<int> children_;  // in the control tree: the ranks that connect here
  Clock::time_point deadline_;
  net::Socket listener_;
  std::vector<Target> targets_;
  std::vector<std::unique_ptr<Attempt>> attempts_;
  std::vector<bool> claimedData_, claimedControl_;
  int incomingData_ = 0, incomingControl_ = 0;
  int addressesFound_ = 0;  // how many ranks have their address in mesh_.addresses
  Clock::time_point nextStoreCheck_, nextAddressPoll_;
  Millis addressPoll_ = kFirstAddressPoll;
  MeshSockets mesh_;
};

MeshSockets MeshBuilder::build() {
  // A single rank has no peer to connect to, so it neither listens nor touches the store.
  if (o_.size == 1) return std::move(mesh_);
  publish();
  resolveTargets();
  std::vector<pollfd> fds;
  nextStoreCheck_ = Clock::now() + kStoreCheckInterval;
  while (!complete()) {
    auto now = Clock::now();
    if (now >= deadline_) timedOut();
    checkStore(now);
    pollAddresses(now);
    // The last address read may be all that was missing.
    if (complete()) break;
    startDue(now);
    fds.clear();
    // The listener sits at index 0, so attempt i is at fds[i + 1]; the loop below relies on that.
    fds.push_back({listener_.fd(), POLLIN, 0});
    for (auto& a : attempts_) {
      short ev = 0;
      if (a->connecting || a->hs.outputPending() > 0) ev |= POLLOUT;
      // Until a non-blocking connect completes, only writability tells whether it succeeded.
      if (!a->connecting && a->hs.inputWanted() > 0) ev |= POLLIN;
      fds.push_back({a->sock.fd(), ev, 0});
    }
    // Sleep until the earliest thing that needs doing without any socket event: a retry, a
    // handshake expiry, the store check or the overall deadline.
    Clock::time_point wake = deadline_;
    for (const auto& t : targets_) {
      if (!t.done && !t.active) wake = std::min(wake, t.retryAt);
    }
    for (const auto& a : attempts_) wake = std::min(wake, a->handshakeDeadline);
    wake = std::min(wake, nextStoreCheck_);
    if (!addressesKnown()) wake = std::min(wake, nextAddressPoll_);
    int rc = ::poll(fds.data(), fds.size(), net::pollTimeoutMs(wake));
    // A signal interrupting poll() is not a failure; the loop simply goes round again.
    if (rc < 0 && errno != EINTR) throw IoError(me() + ": poll failed during connection set-up");
    // Only the entries of fds, built before this pass, are pumped; the attempts accepted below are
    // pumped as they are made.
    size_t polled = fds.size() - 1;
    for (size_t i = 0; i < polled && rc > 0; ++i) {
      if (fds[i + 1].revents != 0 && !attempts_[i]->dead) pump(*attempts_[i]);
    }
    if (rc > 0 && fds[0].revents != 0) {
      for (;;) {
        std::string peer;
        net::Socket s = net::acceptPending(listener_.fd(), &peer);
        if (!s.valid()) break;
        // Room is made before the new attempt joins, so unauthenticated connections never exceed
        // the cap, however many a stranger opens.
        evictOldestPending();
        auto validator = [this](net::PeerKind kind, int rank) { return validate(kind, rank); };
        auto a = std::make_unique<Attempt>(std::move(s),
                                           net::Handshake::acceptor(o_.secret, o_.rank, validator));
        a->peer = peer;
        a->handshakeDeadline = Clock::now() + net::kHandshakeTimeout;
        attempts_.push_back(std::move(a));
        pump(*attempts_.back());
      }
    }
    expirePending(Clock::now());
    attempts_.erase(std::remove_if(attempts_.begin(), attempts_.end(),
                                   [](const std::unique_ptr<Attempt>& a) { return a->dead; }),
                    attempts_.end());
  }
  // Unfinished incoming attempts close here: strangers that never completed the handshake, or (lazy
  // set-up) a peer opening its link early, whose dial is tried again (link_opener.h).
  attempts_.clear();
  if (!eager_) hearVerdict();
  mesh_.listener = std::move(listener_);
  return std::move(mesh_);
}

void MeshBuilder::hearVerdict() {
  if (o_.rank == 0) {
    awaitSubtrees();
    storeCall(o_, "saying that every rank connected", [&] { store_.set(kStartedKey, "ok"); });
    return;
  }
  if (!children_.empty()) {
    storeCall(o_, "saying that its children connected",
              [&] { store_.set(subtreeKey(o_.rank), "ok"); });
  }
  auto key = [](int) { return std::string(kStartedKey); };
  std::string verdict = awaitRanks(o_, store_, {0}, key, deadline_ + kVerdictGrace,
                                   "confirm that every rank connected")
                            .front();
  if (!verdict.empty() && verdict[0] == '!') {
    throw TimeoutError(me() + ": rank 0 could not connect every rank: " + verdict.substr(1));
  }
}

// Rank 0: every relay's word on its children. A failure becomes the verdict the others hear.
void MeshBuilder::awaitSubtrees() {
  std::vector<int> relays;
  for (int r = 1; r < o_.size; ++r) {
    if (tree_.hasChildren(r)) relays.push_back(r);
  }
  if (relays.empty()) return;
  std::string why;
  try {
    std::vector<std::string> words =
        awaitRanks(o_, store_, relays, subtreeKey, deadline_ + kVerdictGrace / 2,
                   "connect their children in the control tree");
    for (size_t i = 0; i < relays.size() && why.empty(); ++i) {
      if (!words[i].empty() && words[i][0] == '!') why = words[i].substr(1);
    }
  } catch (const TimeoutError& e) {
    why = e.what();
  }
  if (why.empty()) return;
  try {
    store_.set(kStartedKey, "!" + why);
  } catch (const std::exception&) {
    // The store failing too: the others learn it from the store, this rank from `why`.
  }
  throw TimeoutError(me() + ": a relay of the control tree could not connect its children: " + why);
}

// An incoming connection that has not yet proved the secret (the only kind a stranger can hold).
bool MeshBuilder::pendingIncoming(const Attempt& a) const {
  return !a.dead && a.target == nullptr && a.hs.state() != net::Handshake::State::Done;
}

// At the cap, the oldest unauthenticated incoming connection makes room for the new one.
void MeshBuilder::evictOldestPending() {
  int pending = 0;
  Attempt* oldest = nullptr;
  for (auto& a : attempts_) {
    if (!pendingIncoming(*a)) continue;
    if (oldest == nullptr) oldest = a.get();
    ++pending;
  }
  if (oldest != nullptr && pending >= net::kMaxPendingHandshakes) {
    abandon(*oldest, "too many connections waiting for the handshake; the oldest is dropped",
            Setback::Rejected);
  }
}

void MeshBuilder::expirePending(Clock::time_point now) {
  for (auto& a : attempts_) {
    if (pendingIncoming(*a) && a->handshakeDeadline <= now) {
      abandon(*a, "handshake timed out", Setback::Rejected);
    }
  }
}

std::string MeshBuilder::doing() const {
  return "waiting for rank(s) " + rankList(missingRanks()) + " to connect";
}

void MeshBuilder::checkStore(Clock::time_point now) {
  if (now < nextStoreCheck_) return;
  nextStoreCheck_ = now + kStoreCheckInterval;
  // The answer is ignored: only a store that no longer answers matters, and storeCall turns its
  // error into one naming the store's owner.
  storeCall(o_, doing(), [&] { return store_.check({addressKey(o_.rank)}); });
}

// Lazy set-up: one look (Store::getMany, without waiting) for every address still missing, so that
// the listener is served between looks (a stranger, or a peer opening its link early), and a rank
// asks the store a few times over its set-up, not once per rank.
void MeshBuilder::pollAddresses(Clock::time_point now) {
  if (addressesKnown() || now < nextAddressPoll_) return;
  std::vector<int> ranks;
  std::vector<std::string> keys;
  for (int r = 0; r < o_.size; ++r) {
    if (!mesh_.addresses[r].empty()) continue;
    ranks.push_back(r);
    keys.push_back(addressKey(r));
  }
  std::vector<std::optional<std::string>> got =
      storeCall(o_, doing(), [&] { return store_.getMany(keys, Millis(0)); });
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (!got[i]) continue;
    mesh_.addresses[ranks[i]] = std::move(*got[i]);
    ++addressesFound_;
  }
  addressPoll_ = std::min(addressPoll_ * 2, kMaxAddressPoll);
  nextAddressPoll_ = now + addressPoll_;
}

void MeshBuilder::publish() {
  int port = 0;
  // The listener binds exactly the address it advertises: a job on one host listens on the
  // loopback only, and HORA_IFACE keeps every other interface closed.
  std::string host = net::advertisedHost(o_.listenHost);
  // Port 0 lets the kernel pick a free port; peers learn it from the store, never from
  // configuration.
  listener_ = net::listenOn(host, 0, &port);
  std::string address = net::joinHostPort(host, port);
  HORA_LOG(Debug, me() << ": listening for peers at " << address);
  // Publishing only after the listener exists means a peer that reads the address can connect at
  // once.
  storeCall(o_, "publishing its address", [&] { store_.set(addressKey(o_.rank), address); });
  mesh_.addresses[o_.rank] = address;
}

void MeshBuilder::resolveTargets() {
  // Data connections go to every lower rank, plus the control connection to the parent.
  auto addTarget = [this](int rank, net::PeerKind kind) {
    Target t;
    t.rank = rank;
    t.kind = kind;
    targets_.push_back(t);
  };
  // The higher rank always connects, so each pair has exactly one data connection and no tie-break.
  for (int j = 0; j < o_.rank && eager_; ++j) addTarget(j, net::PeerKind::Data);
  if (o_.rank > 0) addTarget(tree_.parent(o_.rank), net::PeerKind::Control);
  std::vector<int> lower;
  for (int j = 0; j < o_.rank; ++j) lower.push_back(j);
  std::vector<std::string> addresses =
      // The lower ranks' addresses are awaited here (rank 0's is among them when there is a
      // control target); a lazy set-up reads the higher ones in its loop (pollAddresses), serving
      // the listener meanwhile.
      awaitRanks(o_, store_, lower, addressKey, deadline_, "publish their address");
  for (size_t i = 0; i < lower.size(); ++i) mesh_.addresses[lower[i]] = addresses[i];
  addressesFound_ = o_.rank + 1;  // the lower ranks' and this rank's own
  for (auto& t : targets_) {
    net::parseHostPort(addresses[t.rank], &t.host, &t.port);
    t.retryAt = Clock::now();
  }
}

void MeshBuilder::startDue(Clock::time_point now) {
  for (auto& t : targets_) {
    if (t.done || t.active || t.retryAt > now) continue;
    bool pending = false;
    int err = 0;
    net::Socket s = net::startConnect(t.host, t.port, &pending, &err);
    // A connect that fails at once is retried on the same backoff as one that fails during the
    // handshake.
    if (!s.valid()) {
      t.lastError = std::strerror(err);
      t.retryAt = now + t.backoff;
      t.backoff = std::min(t.backoff * 2, kMaxRetry);
      continue;
    }
    net::Handshake hs = net::Handshake::connector(o_.secret, t.kind, o_.rank, t.rank);
    auto a = std::make_unique<Attempt>(std::move(s), std::move(hs));
    a->target = &t;
    a->connecting = pending;
    a->peer = net::joinHostPort(t.host, t.port);
    t.active = true;
    attempts_.push_back(std::move(a));
    if (!pending) pump(*attempts_.back());
  }
}

std::string MeshBuilder::validate(net::PeerKind kind, int rank) {
  if (rank < 0 || rank >= o_.size)
    return "claims rank " + std::to_string(rank) + " outside the job";
  if (kind == net::PeerKind::Data) {
    // Data connections come only from higher ranks; anything else breaks the
    // one-connection-per-pair rule.
    if (rank <= o_.rank)
      return "rank " + std::to_string(rank) + " should not connect to a higher rank";
    if (claimedData_[rank]) return "a second data connection claims rank " + std::to_string(rank);
    claimedData_[rank] = true;
    return "";
  }
  if (kind == net::PeerKind::Control) {
    // The control plane is a tree (control_tree.h): a rank accepts its children only.
    if (rank == 0 || tree_.parent(rank) != o_.rank) {
      return "rank " + std::to_string(rank) + " is not a child of rank " + std::to_string(o_.rank) +
             " in the control tree of fanout " + std::to_string(tree_.fanout()) +
             " (is HORA_CONTROL_FANOUT the same on every rank?)";
    }
    if (claimedControl_[rank])
      return "a second control connection claims rank " + std::to_string(rank);
    claimedControl_[rank] = true;
    return "";
  }
  return std::string("a ") + net::peerKindName(kind) + " client reached a rank's data port";
}

void MeshBuilder::pump(Attempt& a) {
  if (a.connecting) {
    int err = net::connectResult(a.sock.fd());
    // A refused or reset connect is expected while the peer is still starting, so it is retried
    // quietly.
    if (err != 0) return abandon(a, std::strerror(err), Setback::Routine);
    a.connecting = false;
  }
  // Reading at most inputWanted() bytes leaves whatever the peer sends after the handshake in the
  // socket for the connection's next owner.
  char buf[256];
  for (;;) {
    if (a.hs.outputPending() > 0) {
      net::IoResult r = net::sendSome(a.sock.fd(), a.hs.outputData(), a.hs.outputPending());
      if (r.status == net::IoStatus::WouldBlock) return;
      if (r.status != net::IoStatus::Ok) {
        return abandon(a, net::describe(r) + " during the handshake", Setback::Routine);
      }
      // Keep sending until the kernel stops taking bytes; only then wait for the next event.
      a.hs.outputSent(r.bytes);
      continue;
    }
    if (a.hs.state() == net::Handshake::State::Failed) {
      net::HandshakeFailure kind = a.hs.failureKind();
      bool rejected =
          kind == net::HandshakeFailure::BadProof || kind == net::HandshakeFailure::Refused;
      return abandon(a, a.hs.failure(), rejected ? Setback::Rejected : Setback::Routine);
    }
    // Done is checked only after all output is sent, so the acceptor's Welcome is out before the
    // socket moves into the mesh.
    if (a.hs.state() == net::Handshake::State::Done) return finish(a);
    net::IoResult r = net::recvSome(a.sock.fd(), buf, std::min(sizeof(buf), a.hs.inputWanted()));
    if (r.status == net::IoStatus::WouldBlock) return;
    if (r.status != net::IoStatus::Ok) {
      return abandon(a, net::describe(r) + " during the handshake", Setback::Routine);
    }
    a.hs.input(buf, r.bytes);
    // The acceptor validated and claimed the slot in this step; marking it lets abandon() release
    // it if the Welcome cannot be sent.
    if (a.hs.state() == net::Handshake::State::Done && a.target == nullptr) a.claimed = true;
  }
}

void MeshBuilder::finish(Attempt& a) {
  a.dead = true;  // leaves attempts_; the socket moves into the mesh
  if (a.target != nullptr) {
    Target& t = *a.target;
    t.done = true;
    t.active = false;
    (t.kind == net::PeerKind::Data ? mesh_.data : mesh_.control)[t.rank] = std::move(a.sock);
    HORA_LOG(Debug, me() << ": " << net::peerKindName(t.kind) << " connection to rank " << t.rank
                         << " ready");
    return;
  }
  int rank = a.hs.peerRank();
  (a.hs.peerKind() == net::PeerKind::Data ? mesh_.data : mesh_.control)[rank] = std::move(a.sock);
  ++(a.hs.peerKind() == net::PeerKind::Data ? incomingData_ : incomingControl_);
  // A rank that connected has published its address: look for it (and any other) now.
  if (mesh_.addresses[rank].empty()) {
    nextAddressPoll_ = Clock::now();
    addressPoll_ = kFirstAddressPoll;
  }
  HORA_LOG(Debug, me() << ": " << net::peerKindName(a.hs.peerKind()) << " connection from rank "
                       << rank << " ready");
}

void MeshBuilder::abandon(Attempt& a, const std::string& why, Setback setback) {
  a.dead = true;
  a.sock.reset();
  if (a.target != nullptr) {
    Target& t = *a.target;
    t.active = false;
    t.lastError = why;
    t.retryAt = Clock::now() + t.backoff;
    t.backoff = std::min(t.backoff * 2, kMaxRetry);
    // Refused or reset connections are routine while peers start; a rejected handshake is not.
    if (setback == Setback::Rejected) {
      HORA_LOG(Warning, me() << ": connecting to rank " << t.rank << " at " << a.peer << " failed ("
                             << why << "), retrying");
    } else {
      HORA_LOG(Debug, me() << ": connecting to rank " << t.rank << " at " << a.peer << " failed ("
                           << why << "), retrying");
    }
    return;
  }
  // A validated connection that broke before it finished gives its slot back.
  if (a.claimed || a.hs.state() == net::Handshake::State::Done) {
    (a.hs.peerKind() == net::PeerKind::Data ? claimedData_ : claimedControl_)[a.hs.peerRank()] =
        false;
  }
  HORA_LOG(Warning, me() << ": dropping connection from " << a.peer << ": " << why);
}

bool MeshBuilder::complete() const {
  // Eager: every higher rank opens a data connection here. Each child in the control tree opens
  // its control connection here.
  if (eager_ && incomingData_ < o_.size - 1 - o_.rank) return false;
  if (incomingControl_ < static_cast<int>(children_.size())) return false;
  if (!addressesKnown()) return false;
  for (const auto& t : targets_) {
    if (!t.done) return false;
  }
  return true;
}

// The ranks whose connection with this one is not made yet, and what is missing of each.
std::vector<int> MeshBuilder::missingRanks(std::string* details) const {
  std::set<int> missing;
  auto note = [&](int rank, const std::string& what) {
    missing.insert(rank);
    if (details != nullptr) *details += "; " + what;
  };
  for (const auto& t : targets_) {
    if (t.done) continue;
    note(t.rank, std::string(net::peerKindName(t.kind)) + " connection to rank " +
                     std::to_string(t.rank) + " at " + net::joinHostPort(t.host, t.port) +
                     " not made" +
                     (t.lastError.empty() ? "" : " (last error: " + t.lastError + ")"));
  }
  for (int j = o_.rank + 1; j < o_.size && eager_; ++j) {
    if (!mesh_.data[j].valid()) note(j, "no data connection from rank " + std::to_string(j));
  }
  for (int j = 0; j < o_.size && !eager_; ++j) {
    if (mesh_.addresses[j].empty())
      note(j, "rank " + std::to_string(j) + " has not published its address");
  }
  for (int j : children_) {
    if (!mesh_.control[j].valid()) note(j, "no control connection from rank " + std::to_string(j));
  }
  return std::vector<int>(missing.begin(), missing.end());
}

void MeshBuilder::timedOut() {
  std::string details;
  std::vector<int> missing = missingRanks(&details);
  std::string why = me() + ": timed out after " + std::to_string(o_.startTimeout.count()) +
                    " ms connecting to rank(s) " + rankList(missing) + details +
                    " (did every rank start, with the same secret? raise HORA_START_TIMEOUT if "
                    "they are slow)";
  if (!eager_ && (o_.rank == 0 || !children_.empty())) {
    try {
      // The others wait for this verdict (hearVerdict); rank 0 for a relay's word on its children.
      store_.set(o_.rank == 0 ? kStartedKey : subtreeKey(o_.rank), "!" + why);
    } catch (const std::exception&) {
      // The store failing too: the others learn it from the store, this rank from `why`.
    }
  }
  throw TimeoutError(why);
}

}  // namespace

MeshSockets connectMesh(const ConnectOptions& options, Store& store, bool eager) {
  return MeshBuilder(options, store, eager).build();
}

}  // namespace tcp
}  // namespace hora
