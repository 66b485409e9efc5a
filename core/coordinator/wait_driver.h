#pragma once
// WaitDriver: lets a thread waiting on a Handle do the background loop's work itself while it
// polls, instead of only watching for the loop to finish it (the hand-off between threads costs
// more than a small collective on one host). The runtime supplies it; Handle knows nothing else
// of the runtime.
//
// Called from any waiting thread, often and concurrently. tryDrive() never blocks: it returns at
// once when another thread drives, and otherwise does one bounded step of work.
namespace hora {

class WaitDriver {
 public:
  virtual ~WaitDriver() = default;
  // The thread begins to poll its handle (tryDrive() calls follow).
  virtual void arrive() = 0;
  // True when it did work (the caller may look at its handle again at once).
  virtual bool tryDrive() = 0;
  // The thread stops polling: `finished` when its handle completed; otherwise it sleeps next and
  // what its driving left must be looked after by the runtime itself. It waits for another
  // thread's step at most.
  virtual void depart(bool finished) = 0;
};

}  // namespace hora
