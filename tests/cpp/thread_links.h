#pragma once
// Test fixture: collectives::Links between ranks that are threads of this process, over bounded
// in-memory pipes, so an algorithm of core/collectives/ runs directly (no transport, no
// dispatch) and its pipes fill up long before a segment is through. Each rank's Links records
// the peers it moved bytes with.
//
//   ThreadNet net(4, 1000);  // 4 ranks, pipes of 1000 bytes
//   runRanks(4, [&](int r) { ThreadLinks l(net, r); allreduceRing(l, ...); });
//
// A wait in which no pipe can move for kThreadLinksWait throws TimeoutError (a deadlock).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/collectives/links.h"
#include "core/collectives/scratch_buffers.h"
#include "core/common/errors.h"

namespace hora {
namespace test {

constexpr std::chrono::seconds kThreadLinksWait{20};

// The pipes of one group: pipe (from, to) holds at most `capacity` bytes.
class ThreadNet {
 public:
  ThreadNet(int size, size_t capacity)
      : size_(size), capacity_(capacity), pipes_(static_cast<size_t>(size) * size) {}

  int size() const { return size_; }

 private:
  friend class ThreadLinks;
  std::deque<uint8_t>& pipe(int from, int to) { return pipes_[from * size_ + to]; }

  const int size_;
  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable moved_;
  std::vector<std::deque<uint8_t>> pipes_;
};

class ThreadLinks : public collectives::Links {
 public:
  ThreadLinks(ThreadNet& net, int rank) : net_(net), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return net_.size(); }
  const std::set<int>& peers() const { return peers_; }

  size_t trySend(int peer, const void* data, size_t bytes) override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    std::deque<uint8_t>& p = net_.pipe(rank_, peer);
    const size_t n = std::min(bytes, net_.capacity_ - p.size());
    const auto* src = static_cast<const uint8_t*>(data);
    p.insert(p.end(), src, src + n);
    if (n > 0) {
      peers_.insert(peer);
      net_.moved_.notify_all();
    }
    return n;
  }

  size_t tryRecv(int peer, void* data, size_t bytes) override {
    std::lock_guard<std::mutex> lock(net_.mu_);
    std::deque<uint8_t>& p = net_.pipe(peer, rank_);
    const size_t n = std::min(bytes, p.size());
    std::copy(p.begin(), p.begin() + n, static_cast<uint8_t*>(data));
    p.erase(p.begin(), p.begin() + n);
    if (n > 0) {
      peers_.insert(peer);
      net_.moved_.notify_all();
    }
    return n;
  }

  void waitAny(const Want* wants, size_t count) override {
    std::unique_lock<std::mutex> lock(net_.mu_);
    auto canMove = [&] {
      for (size_t i = 0; i < count; ++i) {
        const Want& w = wants[i];
        if (w.send && net_.pipe(rank_, w.peer).size() < net_.capacity_) return true;
        if (w.recv && !net_.pipe(w.peer, rank_).empty()) return true;
      }
      return false;
    };
    if (!net_.moved_.wait_for(lock, kThreadLinksWait, canMove)) {
      throw TimeoutError("rank " + std::to_string(rank_) + ": no pipe moved (deadlock)");
    }
  }

  uint8_t* scratch(int slot, size_t bytes) override { return scratch_.get(slot, bytes); }

 private:
  ThreadNet& net_;
  const int rank_;
  collectives::ScratchBuffers scratch_;
  std::set<int> peers_;
};

// Runs body(rank) on `size` threads; returns each rank's exception message ("" if none).
inline std::vector<std::string> runRanks(int size, const std::function<void(int)>& body) {
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace test
}  // namespace hora
