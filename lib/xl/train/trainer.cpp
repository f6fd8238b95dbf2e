#include "xl/train/trainer.h"

#include "xl/h5/tokens_file.h"
#include "xl/train/distributed.h"
#include "xl/train/launcher.h"
#include "xl/train/training_run.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/output_lock.h"
#include "xl/util/parse.h"

namespace xl::train {

std::string best_path(const std::string& output) {
  if (io::is_stream(output)) return "";
  const std::string ext = ".h5";
  if (output.size() > ext.size() && parse::ends_with(output, ext))
    return output.substr(0, output.size() - ext.size()) + ".best.h5";
  return output + ".best";
}

// What a training checks of -o before it trains, and the lock it then holds on it (none for a
// stream): one writer per output, a checkpoint to resume from, nothing replaced without -f, a
// directory it can write now rather than in an hour.
std::unique_ptr<io::OutputLock> claim_output(const TrainRequest& req) {
  std::unique_ptr<io::OutputLock> lock;
  if (!io::is_stream(req.output)) lock = std::make_unique<io::OutputLock>(req.output);  // before it is read or replaced
  // The one writer of -o clears what a SIGKILLed writer left: a checkpoint half written (up to its
  // size again on disk for every kill), the best one's link.
  if (lock && lock->held())
    for (const std::string& file : {req.output, best_path(req.output)})
      for (const std::string& left : io::remove_stale_temps(file))
        XL_INFO("removed " << left << ", left unfinished by a training that was killed");
  if (req.resume) {
    XL_CHECK(!io::is_stream(req.output), kExitUsage, "--resume needs -o FILE (the run's latest checkpoint)");
    XL_CHECK(io::exists(req.output), kExitNoInput, req.output << ": no checkpoint to resume from");
    return lock;
  }
  // A device (/dev/null) is written through, never replaced.
  XL_CHECK(req.force || io::is_stream(req.output) || !io::is_file(req.output), kExitCantCreat,
           req.output << ": already exists (use -f to overwrite, or --resume to continue that run)");
  const std::string best = best_path(req.output);
  XL_CHECK(req.force || best.empty() || !io::exists(best), kExitCantCreat,
           best << ": already exists, the best checkpoint of an earlier run with -o " << req.output
                << " (remove it, or use -f to overwrite it)");
  io::AtomicOutput probe(req.output, true, true);  // and stdout is not a terminal
  return lock;
}

int run_training(const TrainRequest& request, char** argv) {
  const DistConfig dist = dist_config_from_env(request.dist_backend, request.dist_timeout);
  const bool piped = io::is_stdio(request.tokens) || io::is_stdio(request.init);
  XL_CHECK(!(io::is_stdio(request.tokens) && io::is_stdio(request.init)), kExitUsage,
           "the tokens and --init cannot both come from stdin");
  // A pipe by name (<(zcat t.h5.gz), a FIFO) is read by the first rank that opens it alone.
  for (const std::string& in : {request.tokens, request.init})
    XL_CHECK((request.nproc_per_node == 1 && dist.single()) || io::is_stdio(in) || !io::is_stream(in),
             kExitUsage, in << " is a pipe, which several ranks cannot each read: give a file, or pipe it to - (stdin)");
  if (request.nproc_per_node > 1 && !started_by_launcher()) {
    XL_CHECK(dist.single(), kExitUsage,
             "--nproc-per-node starts ranks itself, but this process already is rank "
                 << dist.rank << " of " << dist.world << " (started by torchrun, srun or mpirun): drop one of the two");
    // A refused output or input is one line from the launcher, not a line from every rank and the
    // launcher's "rank 0 exited". (The inputs are opened here, not read.)
    const auto lock = claim_output(request);
    if (!io::is_stream(request.tokens)) h5::TokensFile::open(request.tokens);
    if (!request.init.empty() && !io::is_stream(request.init)) h5::File::open(request.init, "an xl checkpoint");
    return launch_local_ranks(argv, request.nproc_per_node, piped);
  }
  stop_with_launcher();
  if (!dist.single()) {  // named "rank N" by start_as_rank()
    if (dist.rank > 0 && log::level() == log::Level::kInfo) log::set_level(log::Level::kQuiet);  // rank 0 speaks
    // Ranks cannot share one pipe; --nproc-per-node (above) hands each its own copy of it.
    XL_CHECK(!piped || stdin_spooled_by_launcher(), kExitUsage,
             "ranks started by torchrun, srun or mpirun read files, not pipes (give TOKENS and --init as files, "
             "or start the ranks with --nproc-per-node)");
  }
  Trainer t(request, dist);
  return t.run();
}

}  // namespace xl::train
