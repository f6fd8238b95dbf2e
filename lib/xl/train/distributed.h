// Data parallelism over processes on LibTorch's c10d: a TCPStore rendezvous from the standard
// environment (torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT; Slurm's and
// MPI's variables mapped onto them), ProcessGroupGloo on CPUs and ProcessGroupNCCL on GPUs when
// the LibTorch has it. One process is the default and talks to nobody.
//
// What the trainer makes of it: the global batch's streams are split over the ranks; skip draws
// and SCH permutations come from identically seeded generators, so every rank skips the same
// layers; gradients are summed (bucketed, while the backward pass still runs: GradientSync) and
// averaged; every stop decision is taken together (StepVote); rank 0 writes what is written.
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace xl::train {

class Heartbeat;

struct DistConfig {
  int rank = 0, world = 1, local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string backend = "auto";  // auto (NCCL on GPUs, Gloo on CPUs), gloo or nccl
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // A rank whose heartbeat stands still this long while the others wait for it in the set-up is
  // taken for gone (a rank of this machine, by its pid, within a second).
  std::chrono::milliseconds silence{std::chrono::seconds(30)};
  bool single() const { return world == 1; }
};

// The rendezvous settings of this process from its environment: RANK/WORLD_SIZE/LOCAL_RANK/
// MASTER_ADDR/MASTER_PORT, else SLURM_PROCID/SLURM_STEP_NUM_TASKS/SLURM_LOCALID, else
// OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK, else PMI_RANK/PMI_SIZE; world 1 when none is set. 64
// with one line naming the variable for a bad value or a missing MASTER_ADDR.
DistConfig dist_config_from_env(const std::string& backend, double timeout_seconds);
// Whether --dist-backend takes `name`: auto, gloo or nccl.
bool is_dist_backend(const std::string& name);
// For a trainer's main, before it reads its flags: a rank of a job started through the environment
// says "rank N" in its lines from the first one, and tells the others when it fails before it has
// joined them (tell_ranks_this_one_failed, after its line).
void start_as_rank();
// For a trainer's failure, after its line: a rank of a job started by srun, mpirun or by hand that
// fails before it joins the others (a bad flag, a missing -c file, a GPU it lacks) tells them
// through the rendezvous store, so that they stop at once instead of waiting out --dist-timeout;
// rank 0 hosts the store until they have read it (at most 30 s). Nothing for one process, for a
// rank of --nproc-per-node (its launcher stops the others), or once the rank has begun to join.
void tell_ranks_this_one_failed(int code);

// Collective operations among the ranks (a no-op group for one process). Failures (a rank died,
// a timeout) throw xl::Error 69 naming the rank that is gone when it can be told; in a rank that
// --nproc-per-node started, a rank that is gone is left to the launcher to name (no message).
class Communicator {
 public:
  virtual ~Communicator();
  // Rendezvous and the process group; 69 for an unreachable master or a port in use.
  static std::unique_ptr<Communicator> connect(const DistConfig& config, const torch::Device& device);

  int rank() const { return config_.rank; }
  int world() const { return config_.world; }
  bool single() const { return config_.single(); }

  // Sums in place over the ranks (blocking).
  virtual void all_reduce_sum(std::vector<torch::Tensor>& tensors, const std::string& what) = 0;
  // Starts a sum in place; finish it with wait().
  struct Pending {
    virtual ~Pending() = default;
    virtual void wait() = 0;
  };
  virtual std::unique_ptr<Pending> start_all_reduce_sum(torch::Tensor& tensor, const std::string& what) = 0;
  // The tensor of every rank, in rank order (equal shapes on every rank).
  virtual std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor, const std::string& what) = 0;
  // Every rank must give the same `value` for `what` (a config, a vocab): a JSON object, so that
  // a difference is named by its first differing key; 78 on every rank, with a line from rank 0
  // naming the first rank that differs from it.
  virtual void check_same(const std::string& what, const std::string& value) = 0;
  // Runs `step` (opening the data, building the model) on every rank and agrees on the outcome:
  // when it throws xl::Error on any rank, every rank throws, with the lowest failing rank's exit
  // code, and each distinct error line is said once, by the lowest rank that found it (the others
  // throw xl::Error with no message). A rank never waits in a collective for one that has failed.
  virtual void set_up_together(const std::string& what, const std::function<void()>& step) = 0;

 protected:
  explicit Communicator(const DistConfig& c);
  DistConfig config_;

 private:
  std::unique_ptr<Heartbeat> heartbeat_;  // while this rank lives: how the others tell it from a lost one
};

}  // namespace xl::train
