#pragma once
// ProcessSetTable: the process sets this rank knows, by id. Set 0 is the world. Every rank knows
// every set (so ids agree everywhere); only members hold a Communicator for it.
//
// Thread safety: the background thread adds and removes sets; frontends read membership from any
// thread, so every method locks. communicator() pointers are for the background thread only.
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/transport/communicator.h"

namespace hora {

// The position of worldRank in a set's ranks (ascending), -1 when it is not one of them.
int setRankIn(const std::vector<int>& ranks, int worldRank);

class ProcessSetTable {
 public:
  explicit ProcessSetTable(int worldRank) : worldRank_(worldRank) {}

  // ranks: world ranks, ascending. comm: null when this rank is not a member.
  void add(int id, std::vector<int> ranks, std::unique_ptr<Communicator> comm);
  void remove(int id);
  // Drops every communicator (membership stays known); closing connections is up to their owners.
  void releaseCommunicators();

  bool contains(int id) const;
  std::vector<int> ranks(int id) const;  // InvalidArgument when unknown
  std::vector<int> ids() const;
  int size(int id) const;
  // This rank's position in the set, -1 when not a member.
  int setRank(int id) const;
  // The set rank of a world rank, -1 when not a member.
  int setRankOf(int id, int worldRank) const;
  // Id of a set with exactly these ranks, -1 when none.
  int findByRanks(const std::vector<int>& ranks) const;
  Communicator* communicator(int id) const;

  // This rank's place in set `id`, in one lookup from any thread; nullopt when the set is unknown.
  struct Place {
    int setRank;  // -1 when this rank is not a member
    int size;
  };
  std::optional<Place> place(int id) const;

  // What running a collective of set `id` needs, in one lookup. Background thread only: the
  // pointers stay valid until it removes the set.
  struct Member {
    Communicator* comm = nullptr;             // null when this rank is not a member
    int setRank = -1;                         // -1 when this rank is not a member
    const std::vector<int>* ranks = nullptr;  // world ranks, ascending
  };
  Member member(int id) const;  // InvalidArgument when unknown

 private:
  struct Entry {
    std::vector<int> ranks;
    std::unique_ptr<Communicator> comm;
  };
  const Entry& get(int id) const;

  int worldRank_;
  mutable std::mutex mu_;
  std::map<int, Entry> sets_;
};

}  // namespace hora
