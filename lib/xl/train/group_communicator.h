// The Communicator of a c10d process group (ProcessGroupGloo here, ProcessGroupNCCL in
// nccl_group_cuda.cpp): collectives, their failures turned into one line naming the rank that is
// gone, and the agreement checks through the rendezvous store. Internal to train/.
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "xl/train/distributed.h"

namespace xl::train {

// Why a collective failed, as well as it can be told: "rank 1 (pid 4242) is gone", "rank 0, the
// rendezvous host, is gone or unreachable", "rank 1 (pid 4242 on node7) has stopped answering: its
// heartbeat stood still for 3 s" or "another rank is gone or stalled" (the last two `gone` false).
struct LostRank {
  std::string words;
  bool gone = true;
};
LostRank lost_rank(c10d::Store& store, const DistConfig& config);
// The key prefix of this job in the store (torchrun restarts get fresh keys).
std::string store_prefix();
// The store a process group keeps its keys in: under store_prefix(), so that the ranks torchrun
// restarts (its agent keeps the store) do not read the dead ranks' addresses and wait on them.
c10::intrusive_ptr<c10d::Store> group_store(const c10::intrusive_ptr<c10d::Store>& store);
// Every rank writes `value` under KEY<its rank>; returns every rank's, in rank order. Waits up to
// the job's timeout, but ends early once a rank it waits for is gone: one of this machine within a
// second of its end, one elsewhere when its heartbeat has stood still for config.silence. Then the
// lowest other rank says "WHAT failed: rank 1 (pid 4242 on node7) has not been heard from for 30 s"
// (xl::Error 69) and the rest end with 69 and no message; under the --nproc-per-node launcher, which
// names a rank that ended, a plain exception for guarded().
std::vector<std::string> exchange(c10d::Store& store, const DistConfig& config, const std::string& what,
                                  const std::string& key, const std::string& value);
// Every rank publishes `value` under `what`; throws 78 on every rank when one differs from rank 0's
// (rank 0's error names it, the others' are silent).
void check_same_through_store(c10d::Store& store, const DistConfig& config, const std::string& what,
                              const std::string& value, int serial);
// Communicator::set_up_together through the store: each rank publishes its outcome there.
void set_up_through_store(c10d::Store& store, const DistConfig& config, const std::string& what,
                          const std::function<void()>& step, int serial);
// A rank that failed before it joined the others leaves its exit code and place in the store.
void post_failure(c10d::Store& store, int rank, int code);
// Waits until every rank has said in the store where it runs, up to the job's timeout (69 naming
// the first rank missing). Ends with 69 as soon as a rank posts that it failed before it joined:
// the lowest rank that did not fail names it, the others end without a word.
void await_ranks(c10d::Store& store, const DistConfig& config);
// Runs a collective; any failure becomes xl::Error 69 with lost_rank()'s words (none where the
// --nproc-per-node launcher names the rank that is gone).
void guarded(c10d::Store& store, const DistConfig& config, const std::string& what, const std::function<void()>& f);

template <typename Group>
class GroupCommunicator : public Communicator {
 public:
  GroupCommunicator(const DistConfig& c, c10::intrusive_ptr<c10d::Store> store, c10::intrusive_ptr<Group> group)
      : Communicator(c), store_(std::move(store)), group_(std::move(group)) {}

  void all_reduce_sum(std::vector<torch::Tensor>& tensors, const std::string& what) override {
    guarded(*store_, config_, what, [&] { group_->allreduce(tensors)->wait(); });
  }

  std::unique_ptr<Pending> start_all_reduce_sum(torch::Tensor& tensor, const std::string& what) override {
    struct Work : Pending {
      GroupCommunicator* self;
      std::string what;
      std::vector<torch::Tensor> tensors;
      decltype(std::declval<Group&>().allreduce(std::declval<std::vector<at::Tensor>&>())) work;
      void wait() override {
        guarded(*self->store_, self->config_, what, [&] { work->wait(); });
      }
    };
    auto w = std::make_unique<Work>();
    w->self = this;
    w->what = what;
    w->tensors = {tensor};
    guarded(*store_, config_, what, [&] { w->work = group_->allreduce(w->tensors); });
    return w;
  }

  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor, const std::string& what) override {
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < config_.world; ++r) out[0].push_back(torch::empty_like(tensor));
    std::vector<at::Tensor> in = {tensor.contiguous()};
    guarded(*store_, config_, what, [&] { group_->allgather(out, in)->wait(); });
    return out[0];
  }

  void check_same(const std::string& what, const std::string& value) override {
    check_same_through_store(*store_, config_, what, value, serial_++);
  }

  void set_up_together(const std::string& what, const std::function<void()>& step) override {
    set_up_through_store(*store_, config_, what, step, serial_++);
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<Group> group_;
  int serial_ = 0;
};

// ProcessGroupNCCL for a build with CUDA; 69 with one line in a build without.
std::unique_ptr<Communicator> connect_nccl(const DistConfig& config, const c10::intrusive_ptr<c10d::Store>& store);

}  // namespace xl::train
