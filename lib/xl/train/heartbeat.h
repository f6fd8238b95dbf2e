// A rank's sign of life in the rendezvous store: a counter it raises every second, from a thread of
// its own, while it lives. The ranks that wait for it in the set-up can then tell a rank that is
// slow (still loading its data) from one whose process or machine is gone: a rank on another
// machine leaves neither a pid they can look up nor, until a collective, a socket they watch. When
// a collective fails, a counter that stands still names the rank that stopped or hung.
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace xl::train {

// The store key of rank `rank`'s counter.
std::string heartbeat_key(int rank);

class Heartbeat {
 public:
  // Raises heartbeat_key(rank) in `store` now and every `period` (`store` is this thread's alone:
  // a TCPStore holds its lock while it waits for a key, which would stop the beats).
  Heartbeat(c10::intrusive_ptr<c10d::Store> store, int rank, std::chrono::milliseconds period);
  // Stops the beats; waits at most a second for a store call in flight (the thread then ends alone).
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  struct State;  // shared with the thread (heartbeat.cpp)

 private:
  std::shared_ptr<State> state_;
};

// What the ranks waiting for `rank` make of its beats: how long its counter has stood still while
// this watcher looked (zero until the rank has beaten once; a rank that never beat is left to the
// timeout). Only the watcher's own running time counts, at most 2 s between two looks: a job
// stopped as a whole (Ctrl-Z, then fg) takes no rank for silent.
class BeatWatch {
 public:
  BeatWatch(c10d::Store& store, int rank) : store_(store), key_(heartbeat_key(rank)) {}
  std::chrono::steady_clock::duration silent_for();

 private:
  c10d::Store& store_;
  std::string key_;
  int64_t last_ = -1;
  std::chrono::steady_clock::time_point looked_;
  std::chrono::steady_clock::duration silent_{};
};

}  // namespace xl::train
