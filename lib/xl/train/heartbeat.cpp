#include "xl/train/heartbeat.h"

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
      bool failed = false;
      try {
        store->add(key, 1);
      } catch (const std::exception&) {
        failed = true;  // the store is gone: the collectives will say so
      }
      lock.lock();
      if (failed) break;
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
  const auto now = std::chrono::steady_clock::now();
  if (!store_.check({key_})) return {};
  const int64_t beats = store_.add(key_, 0);
  if (beats != last_) {
    last_ = beats;
    changed_ = now;
  }
  return now - changed_;
}

}  // namespace xl::train
