#include "xl/train/heartbeat.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "xl/train/group_communicator.h"

namespace xl::train {

std::string heartbeat_key(int rank) { return store_prefix() + "beat/" + std::to_string(rank); }

// Shared with the thread, which may outlive the Heartbeat when its store call hangs.
struct Heartbeat::State {
  std::mutex mutex;
  std::condition_variable wake;
  bool stop = false, ended = false;
};

Heartbeat::Heartbeat(c10::intrusive_ptr<c10d::Store> store, int rank, std::chrono::milliseconds period)
    : state_(std::make_shared<State>()) {
  std::thread([state = state_, store = std::move(store), key = heartbeat_key(rank), period] {
    std::unique_lock<std::mutex> lock(state->mutex);
    while (!state->stop) {
      lock.unlock();
      try {
        store->add(key, 1);
      } catch (const std::exception&) {
        // A store that is gone fails the collectives, which say so; one that timed out may answer
        // the next beat, and a thread that ended here would read as a rank that stopped.
      }
      lock.lock();
      state->wake.wait_for(lock, period, [&] { return state->stop; });
    }
    state->ended = true;
    state->wake.notify_all();
  }).detach();
}

Heartbeat::~Heartbeat() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->stop = true;
  state_->wake.notify_all();
  state_->wake.wait_for(lock, std::chrono::seconds(1), [&] { return state_->ended; });
}

std::chrono::steady_clock::duration BeatWatch::silent_for() {
  if (!store_.check({key_})) return {};
  const int64_t beats = store_.add(key_, 0);
  const auto now = std::chrono::steady_clock::now();
  if (beats != last_) silent_ = {};
  else silent_ += std::min<std::chrono::steady_clock::duration>(now - looked_, std::chrono::seconds(2));
  last_ = beats;
  looked_ = now;
  return silent_;
}

}  // namespace xl::train
