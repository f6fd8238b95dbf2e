#include "xl/train/distributed.h"

#include <signal.h>
#include <unistd.h>

// Every LibTorch xl builds against has Gloo; not every packaging exports the define its header wants.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <thread>

#include "xl/train/group_communicator.h"
#include "xl/train/heartbeat.h"
#include "xl/train/launcher.h"
#include "xl/util/error.h"
#include "xl/util/failure.h"
#include "xl/util/json_io.h"
#include "xl/util/log.h"
#include "xl/util/resources.h"

namespace xl::train {
namespace {

// Set once this process starts to connect: a failure after it is the ranks' to share (set_up_together,
// the collectives), one before it is told to them by tell_ranks_this_one_failed().
std::atomic<bool> joining{false};

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, int fallback, int min) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  XL_CHECK(end && *end == '\0' && errno == 0 && x >= min && x <= 1 << 20, kExitUsage,
           "environment variable " << name << "=" << v << " is not a number from " << min);
  return static_cast<int>(x);
}

// Whether process `pid` of this machine has ended (a zombie not yet reaped has, too).
bool process_gone(long pid) {
  if (kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string skip, state;
  stat >> skip >> skip >> state;  // pid, (comm), state; a comm with spaces reads wrong and says alive
  return state == "Z" || state == "X";
}

// One process: every collective is the identity.
class SingleProcess : public Communicator {
 public:
  explicit SingleProcess(const DistConfig& c) : Communicator(c) {}
  void all_reduce_sum(std::vector<torch::Tensor>&, const std::string&) override {}
  std::unique_ptr<Pending> start_all_reduce_sum(torch::Tensor&, const std::string&) override {
    struct Done : Pending {
      void wait() override {}
    };
    return std::make_unique<Done>();
  }
  std::vector<torch::Tensor> all_gather(const torch::Tensor& t, const std::string&) override { return {t}; }
  void check_same(const std::string&, const std::string&) override {}
  void set_up_together(const std::string&, const std::function<void()>& step) override { step(); }
};

std::string store_get(c10d::Store& store, const std::string& key) {
  auto v = store.get(key);
  return std::string(v.begin(), v.end());
}

void store_set(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

std::string place_key(int r) { return store_prefix() + "pid/" + std::to_string(r); }
std::string failed_key(int r) { return store_prefix() + "failed/" + std::to_string(r); }
// How many ranks failed before they joined, and how many ranks have read that.
std::string failed_count_key() { return store_prefix() + "failed"; }
std::string failed_read_key() { return store_prefix() + "failed_read"; }
std::string here() { return std::to_string(getpid()) + " " + host_name(); }

// Where rank r runs, as it wrote it to the store when it connected (pid 0: it has not connected).
struct Place {
  long pid = 0;
  std::string host;
};

Place place_of(c10d::Store& store, int r) {
  const std::string key = place_key(r);
  Place p;
  if (!store.check({key})) return p;
  std::istringstream who(store_get(store, key));
  who >> p.pid >> p.host;
  return p;
}

// The pid of each other rank that runs on this machine (0 for this one and those elsewhere).
std::vector<long> pids_on_this_machine(c10d::Store& store, const DistConfig& config) {
  const std::string me = host_name();
  std::vector<long> pids(static_cast<size_t>(config.world), 0);
  for (int r = 0; r < config.world; ++r) {
    if (r == config.rank) continue;
    const Place p = place_of(store, r);
    if (p.host == me && p.pid > 0) pids[static_cast<size_t>(r)] = p.pid;
  }
  return pids;
}

// "rank 1 (pid 4242)" for a rank of this machine, "rank 1 (pid 4242 on node7)" for one elsewhere.
std::string rank_name(int r, const Place& p) {
  return "rank " + std::to_string(r) + " (pid " + std::to_string(p.pid) +
         (p.host.empty() || p.host == host_name() ? "" : " on " + p.host) + ")";
}

std::string rank_name(c10d::Store& store, int r) { return rank_name(r, place_of(store, r)); }

}  // namespace

bool is_dist_backend(const std::string& name) { return name == "auto" || name == "gloo" || name == "nccl"; }

DistConfig dist_config_from_env(const std::string& backend, double timeout_seconds) {
  DistConfig c;
  c.backend = backend;
  XL_CHECK(is_dist_backend(backend), kExitUsage,
           "--dist-backend must be auto, gloo or nccl, not '" << backend << "'");
  XL_CHECK(timeout_seconds > 0, kExitUsage, "--dist-timeout must be positive");
  c.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  // torchrun, then the launchers of Slurm, Open MPI and MPICH.
  // Slurm: the step's task count (srun's), not the job's, which a batch script also sees.
  struct Names {
    const char *rank, *world, *local_rank;
  };
  for (const Names& n : {Names{"RANK", "WORLD_SIZE", "LOCAL_RANK"},
                         Names{"SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID"},
                         Names{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
                         Names{"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"}}) {
    if (!env(n.world)) continue;
    c.world = env_int(n.world, 1, 1);
    c.rank = env_int(n.rank, 0, 0);
    c.local_rank = env_int(n.local_rank, c.rank, 0);
    XL_CHECK(c.rank < c.world, kExitUsage, "environment: " << n.rank << "=" << c.rank << " is not below " << n.world << "=" << c.world);
    break;
  }
  if (c.single()) return c;
  XL_CHECK(env("MASTER_ADDR"), kExitUsage,
           "rank " << c.rank << " of " << c.world << ": set MASTER_ADDR (and MASTER_PORT) to the rendezvous host, e.g. "
                      "MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1) under Slurm");
  c.master_addr = env("MASTER_ADDR");
  c.master_port = env_int("MASTER_PORT", 29500, 1);
  XL_CHECK(c.master_port < 65536, kExitUsage, "environment variable MASTER_PORT=" << c.master_port << " is not a port");
  return c;
}

std::string store_prefix() {
  const char* restart = env("TORCHELASTIC_RESTART_COUNT");
  return std::string("xl/") + (restart ? restart : "0") + "/";
}

c10::intrusive_ptr<c10d::Store> group_store(const c10::intrusive_ptr<c10d::Store>& store) {
  return c10::make_intrusive<c10d::PrefixStore>(store_prefix() + "group", store);
}

std::vector<std::string> exchange(c10d::Store& store, const DistConfig& config, const std::string& what,
                                  const std::string& key, const std::string& value) {
  store_set(store, key + std::to_string(config.rank), value);
  // A rank that ends before it writes its value ends the wait early, not at the job's timeout
  // (srun and mpirun leave the others waiting): one of this machine as soon as its pid is gone,
  // one elsewhere when its heartbeat has stood still for config.silence. A store lookup every
  // 10 ms is a loopback round trip in a set-up that takes seconds.
  const std::vector<long> local = pids_on_this_machine(store, config);
  const auto deadline = std::chrono::steady_clock::now() + config.timeout;
  // The lost rank is named once: by the lowest other rank, which leaves its verdict in the store
  // for the rest (they end without a word) and waits until they have read it, since it may host
  // the store. A rank that finds no verdict within 5 s says it itself.
  const std::string verdict = key + "verdict", read = key + "verdict_read";
  std::string lost_line;
  std::chrono::steady_clock::time_point lost_at;
  std::vector<std::string> values;
  for (int r = 0; r < config.world; ++r) {
    const std::string k = key + std::to_string(r);
    BeatWatch beats(store, r);
    for (int polls = 0; !store.check({k}); ++polls) {
      const auto now = std::chrono::steady_clock::now();
      if (polls % 50 == 49) {
        if (store.check({verdict})) {
          store.add(read, 1);
          throw Error(kExitUnavailable, "");
        }
        const long pid = local[static_cast<size_t>(r)];
        const bool gone = pid > 0 && process_gone(pid);
        // The --nproc-per-node launcher names a rank that ended, with its status (guarded()).
        if (gone && started_by_launcher()) throw std::runtime_error("rank " + std::to_string(r) + " ended before it answered");
        const auto silent = std::chrono::duration_cast<std::chrono::seconds>(beats.silent_for());
        if (lost_line.empty() && (gone || silent >= config.silence)) {
          lost_line = what + " failed: " + rank_name(store, r) + " " +
                      (gone ? "is gone" : "has not been heard from for " + std::to_string(silent.count()) + " s");
          lost_at = now;
          if (config.rank == (r == 0 ? 1 : 0)) {
            store_set(store, verdict, lost_line);
            const auto until = now + std::chrono::seconds(2);
            while (store.add(read, 0) < config.world - 2 && std::chrono::steady_clock::now() < until)
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            throw Error(kExitUnavailable, lost_line);
          }
        }
        if (!lost_line.empty() && now - lost_at > std::chrono::seconds(5)) throw Error(kExitUnavailable, lost_line);
      }
      if (now > deadline) throw std::runtime_error("no " + k + " from rank " + std::to_string(r) + " within the timeout");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    values.push_back(store_get(store, k));
  }
  return values;
}

void post_failure(c10d::Store& store, int rank, int code) {
  store_set(store, failed_key(rank), std::to_string(code) + " " + here());
  store.add(failed_count_key(), 1);  // answered after the set: the value is in place
}

void await_ranks(c10d::Store& store, const DistConfig& config) {
  const auto deadline = std::chrono::steady_clock::now() + config.timeout;
  for (int r = 0; r < config.world; ++r) {
    while (!store.check({place_key(r)})) {
      if (store.add(failed_count_key(), 0) > 0) {
        // Named by the lowest rank that did not fail; a failed rank has said why itself.
        int first = -1;
        bool lowest = true;
        for (int f = 0; f < config.world; ++f) {
          const bool failed = store.check({failed_key(f)});
          if (failed && first < 0) first = f;
          if (!failed && f < config.rank) lowest = false;
        }
        store.add(failed_read_key(), 1);
        if (first < 0 || !lowest) throw Error(kExitUnavailable, "");
        std::istringstream what(store_get(store, failed_key(first)));
        int code = 0;
        Place p;
        what >> code >> p.pid >> p.host;
        XL_FAIL(kExitUnavailable, "setting up the run failed: " << rank_name(first, p) << " failed before it joined the others (exit "
                                                                << code << "; its own error line says why)");
      }
      XL_CHECK(std::chrono::steady_clock::now() < deadline, kExitUnavailable,
               "setting up the run failed: rank " << r << " never reached the rendezvous within --dist-timeout (it did not start, "
                                                     "or failed before it connected)");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

namespace {

// Each other rank's heartbeat count, -1 for one that has not beaten (and this rank's).
std::vector<int64_t> beat_counts(c10d::Store& store, const DistConfig& config) {
  std::vector<int64_t> counts(static_cast<size_t>(config.world), -1);
  for (int r = 0; r < config.world; ++r)
    if (r != config.rank && store.check({heartbeat_key(r)})) counts[static_cast<size_t>(r)] = store.add(heartbeat_key(r), 0);
  return counts;
}

}  // namespace

LostRank lost_rank(c10d::Store& store, const DistConfig& config) {
  const LostRank store_gone{"rank 0, the rendezvous host, is gone or unreachable"};
  std::vector<long> local;
  std::vector<int64_t> beats;
  try {
    // (A rank that never reached the store is named by await_ranks, before any collective.)
    local = pids_on_this_machine(store, config);
    beats = beat_counts(store, config);
  } catch (const std::exception&) {
    return store_gone;
  }
  // A killed process closes its sockets before it is a zombie: the peers can see the connection
  // reset a moment before /proc says it is gone, so look for 2 s. A rank whose heartbeat (a beat
  // a second) stood still for 3 s is stopped, hung or gone with its machine.
  constexpr int kLooks = 30;
  for (int look = 0; look < kLooks; ++look) {
    for (int r = 0; r < config.world && look < 20; ++r)
      if (const long pid = local[static_cast<size_t>(r)]; pid > 0 && process_gone(pid))
        return {"rank " + std::to_string(r) + " (pid " + std::to_string(pid) + ") is gone"};  // the store may be gone with it
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  try {
    const std::vector<int64_t> now = beat_counts(store, config);
    for (int r = 0; r < config.world; ++r)
      if (const int64_t b = beats[static_cast<size_t>(r)]; b >= 0 && now[static_cast<size_t>(r)] == b)
        return {rank_name(store, r) + " has stopped answering: its heartbeat stood still for " +
                    std::to_string(kLooks / 10) + " s",
                false};
  } catch (const std::exception&) {
    return store_gone;
  }
  return {"another rank is gone or stalled", false};
}

void guarded(c10d::Store& store, const DistConfig& config, const std::string& what, const std::function<void()>& f) {
  try {
    f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    const LostRank lost = lost_rank(store, config);
    // The launcher says which rank ended and how (its own error line, or its signal), once: seven
    // ranks' "rank 0 is gone" would bury it.
    if (lost.gone && started_by_launcher()) throw Error(kExitUnavailable, "");
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    XL_FAIL(kExitUnavailable, what << " failed: " << lost.words << " (" << why.substr(0, 160) << ")");
  }
}

void set_up_through_store(c10d::Store& store, const DistConfig& config, const std::string& what,
                          const std::function<void()>& step, int serial) {
  // "" for success, else "CODE MESSAGE" (a message only for an xl::Error that has one).
  std::string outcome;
  std::exception_ptr failure;
  bool said = false;
  try {
    step();
  } catch (const Error& e) {
    outcome = std::to_string(e.code()) + " " + e.what();
    failure = std::current_exception();
    said = *e.what() != '\0';
  } catch (...) {  // out of memory, LibTorch's errors: said by this rank as they are
    outcome = std::to_string(kExitSoftware) + " ";
    failure = std::current_exception();
  }
  const std::string key = store_prefix() + "set_up/" + std::to_string(serial) + "/";
  std::vector<std::string> outcomes;
  guarded(store, config, what, [&] { outcomes = exchange(store, config, what, key, outcome); });
  int first_failed = -1;
  for (int r = 0; r < config.world && first_failed < 0; ++r)
    if (!outcomes[static_cast<size_t>(r)].empty()) first_failed = r;
  if (first_failed < 0) return;
  if (failure) {
    bool said_before = false;  // by a lower rank, in the same words (an unsaid error is never the same)
    for (int r = 0; r < config.rank && said; ++r) said_before |= outcomes[static_cast<size_t>(r)] == outcome;
    if (!said_before) std::rethrow_exception(failure);
    throw Error(std::stoi(outcome), "");
  }
  throw Error(std::stoi(outcomes[static_cast<size_t>(first_failed)]), "");
}

namespace {

// The first setting in which two JSON objects differ, in their order, "model.n_token = 14 against
// rank 0's 66" (`other` is rank r's); empty when they are not both objects or do not differ.
std::string first_difference(const nlohmann::ordered_json& mine, const nlohmann::ordered_json& other,
                             const std::string& at = "") {
  if (!mine.is_object() || !other.is_object()) return "";
  for (const auto& [key, value] : other.items()) {
    const std::string path = at + key;
    if (!mine.contains(key)) return path + " = " + json_line(value) + ", which rank 0 lacks";
    if (mine[key] == value) continue;
    const std::string inner = first_difference(mine[key], value, path + ".");
    return inner.empty() ? path + " = " + json_line(value) + " against rank 0's " + json_line(mine[key]) : inner;
  }
  return "";
}

}  // namespace

void check_same_through_store(c10d::Store& store, const DistConfig& config, const std::string& what,
                              const std::string& value, int serial) {
  const std::string key = store_prefix() + "same/" + std::to_string(serial) + "/";
  std::vector<std::string> values;
  const std::string comparing = "comparing the ranks' " + what;
  guarded(store, config, comparing, [&] { values = exchange(store, config, comparing, key, value); });
  for (int r = 1; r < config.world; ++r) {
    if (values[static_cast<size_t>(r)] == values[0]) continue;
    if (config.rank != 0) throw Error(kExitConfig, "");  // every rank finds it; rank 0 says it
    const std::string how = first_difference(nlohmann::ordered_json::parse(values[0], nullptr, false),
                                             nlohmann::ordered_json::parse(values[static_cast<size_t>(r)], nullptr, false));
    XL_FAIL(kExitConfig, "rank " << r << "'s " << what << " differ from rank 0's" << (how.empty() ? "" : ": " + how)
                                 << " (every rank must be started with the same settings and files)");
  }
}

Communicator::Communicator(const DistConfig& c) : config_(c) {}
Communicator::~Communicator() = default;

namespace {

// Under torchrun its agent hosts the store; otherwise rank 0 does.
bool agent_hosts_store() {
  const char* agent = env("TORCHELASTIC_USE_AGENT_STORE");
  return agent && std::string(agent) == "True";
}

// A connection to the rendezvous store: the server too for `serve`.
c10::intrusive_ptr<c10d::Store> open_store(const DistConfig& config, bool serve, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(config.master_port);
  o.isServer = serve;
  o.numWorkers = serve ? c10::optional<std::size_t>(static_cast<std::size_t>(config.world)) : c10::nullopt;
  o.waitWorkers = false;
  o.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(config.master_addr, o);
}

std::unique_ptr<Communicator> connect_group(const DistConfig& config, const torch::Device& device,
                                            const c10::intrusive_ptr<c10d::Store>& store) {
  const bool nccl = config.backend == "nccl" || (config.backend == "auto" && device.is_cuda());
  if (nccl) return connect_nccl(config, store);
  XL_CHECK(device.is_cpu() || config.backend == "gloo", kExitUsage, "--dist-backend gloo all-reduces CPU tensors: use nccl on GPUs");
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  guarded(*store, config, "setting up the Gloo process group", [&] {
    auto options = c10d::ProcessGroupGloo::Options::create(config.timeout);
    const std::string& a = config.master_addr;
    const bool loopback = a == "localhost" || a.rfind("127.", 0) == 0;
    const char* ifname = env("GLOO_SOCKET_IFNAME");
    options->devices.push_back(ifname     ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                               : loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                          : c10d::ProcessGroupGloo::createDefaultDevice());
    options->threads = 2;
    group = c10::make_intrusive<c10d::ProcessGroupGloo>(group_store(store), config.rank, config.world, options);
  });
  return std::make_unique<GroupCommunicator<c10d::ProcessGroupGloo>>(config, store, group);
}

}  // namespace

std::unique_ptr<Communicator> Communicator::connect(const DistConfig& config, const torch::Device& device) {
  if (config.single()) return std::make_unique<SingleProcess>(config);
  // A peer that dies closes its sockets, and Gloo's next write to one raised SIGPIPE, which killed
  // this rank without a word. Ignored (as CPython ignores it at start-up, so PyTorch's own Python
  // ranks never meet it), the write fails and the collective names the rank that is gone. A
  // checkpoint piped to a reader that quit is then a write error (74), not a silent death.
  signal(SIGPIPE, SIG_IGN);
  joining = true;
  // LibTorch 2's c10d logs each failed connection try and each lost peer to stderr, with
  // backtraces; a rank says what went wrong in its own one line, so that log is fatal-only.
  FLAGS_caffe2_log_level = 3;
  const bool serve = config.rank == 0 && !agent_hosts_store();
  c10::intrusive_ptr<c10d::Store> store, beat_store;
  try {
    store = open_store(config, serve, config.timeout);
    // The heartbeat's own connection, so that its beats never wait behind this rank's store calls.
    beat_store = open_store(config, false, std::chrono::seconds(10));
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));
    XL_FAIL(kExitUnavailable, "no rendezvous at " << config.master_addr << ":" << config.master_port
                                      << " (" << why.substr(0, 160) << ")"
                                      << (config.rank == 0 ? "; is the port in use?" : "; is rank 0 running and MASTER_ADDR right?"));
  }
  store_set(*store, place_key(config.rank), here());
  auto heartbeat = std::make_unique<Heartbeat>(beat_store, config.rank, std::chrono::seconds(1));
  // Before the process group, whose set-up waits out the timeout for a rank that never comes.
  guarded(*store, config, "setting up the run", [&] { await_ranks(*store, config); });
  std::unique_ptr<Communicator> communicator = connect_group(config, device, store);
  communicator->heartbeat_ = std::move(heartbeat);
  return communicator;
}

void start_as_rank() {
  after_failure(tell_ranks_this_one_failed);
  try {
    const DistConfig config = dist_config_from_env("auto", 10);
    if (!config.single()) log::set_tool_name(log::tool_name() + " rank " + std::to_string(config.rank));
  } catch (const std::exception&) {
    // A bad environment is said by run_training, which reads it again.
  }
}

void tell_ranks_this_one_failed(int code) {
  if (joining || started_by_launcher()) return;
  DistConfig config;
  try {
    config = dist_config_from_env("auto", 10);
  } catch (const std::exception&) {
    return;  // the environment itself was the problem
  }
  if (config.single()) return;
  try {
    const bool serve = config.rank == 0 && !agent_hosts_store();
    const auto store = open_store(config, serve, std::chrono::seconds(10));
    post_failure(*store, config.rank, code);
    if (!serve) return;
    // Hosting the store: stay until every other rank has read it or failed as well (the same typo
    // on every rank), or for 30 s.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (store->add(failed_count_key(), 0) - 1 + store->add(failed_read_key(), 0) < config.world - 1 &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } catch (const std::exception&) {
    // No store to tell (rank 0 gone too, a port in use): the others wait out their timeout.
  }
}

}  // namespace xl::train
