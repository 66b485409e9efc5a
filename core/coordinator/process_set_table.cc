#include "core/coordinator/process_set_table.h"

#include <algorithm>

#include "core/common/errors.h"

namespace hora {

int setRankIn(const std::vector<int>& ranks, int worldRank) {
  auto it = std::lower_bound(ranks.begin(), ranks.end(), worldRank);
  if (it == ranks.end() || *it != worldRank) return -1;
  return static_cast<int>(it - ranks.begin());
}

void ProcessSetTable::add(int id, std::vector<int> ranks, std::unique_ptr<Communicator> comm) {
  std::lock_guard<std::mutex> lock(mu_);
  sets_[id] = Entry{std::move(ranks), std::move(comm)};
}

void ProcessSetTable::remove(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  sets_.erase(id);
}

void ProcessSetTable::releaseCommunicators() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& kv : sets_) kv.second.comm.reset();
}

const ProcessSetTable::Entry& ProcessSetTable::get(int id) const {
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    throw InvalidArgument("process set " + std::to_string(id) +
                          " is not known to this rank: add it with add_process_set() first, or "
                          "it was removed");
  }
  return it->second;
}

bool ProcessSetTable::contains(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return sets_.count(id) > 0;
}

std::vector<int> ProcessSetTable::ranks(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return get(id).ranks;
}

std::vector<int> ProcessSetTable::ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  for (const auto& kv : sets_) out.push_back(kv.first);
  return out;
}

int ProcessSetTable::size(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(get(id).ranks.size());
}

int ProcessSetTable::setRank(int id) const { return setRankOf(id, worldRank_); }

int ProcessSetTable::setRankOf(int id, int worldRank) const {
  std::lock_guard<std::mutex> lock(mu_);
  return setRankIn(get(id).ranks, worldRank);
}

std::optional<ProcessSetTable::Place> ProcessSetTable::place(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return std::nullopt;
  const std::vector<int>& ranks = it->second.ranks;
  return Place{setRankIn(ranks, worldRank_), static_cast<int>(ranks.size())};
}

ProcessSetTable::Member ProcessSetTable::member(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e = get(id);
  return Member{e.comm.get(), setRankIn(e.ranks, worldRank_), &e.ranks};
}

int ProcessSetTable::findByRanks(const std::vector<int>& ranks) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& kv : sets_) {
    if (kv.second.ranks == ranks) return kv.first;
  }
  return -1;
}

Communicator* ProcessSetTable::communicator(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return get(id).comm.get();
}

}  // namespace hora
