#include "xl/train/training_run.h"

#include <unistd.h>

#include <filesystem>

#include "xl/model/model_io.h"
#include "xl/train/trainer.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"

namespace xl::train {

checkpoint::Checkpoint Trainer::snapshot() {
  checkpoint::Checkpoint ck;
  ck.phase = cfg_.phase;
  ck.model_config = model_->config.to_json();
  ck.train_config = cfg_.to_json();
  ck.state = state_;
  ck.state.epoch = cursor_.epoch;
  ck.state.offset = cursor_.offset;
  ck.state.phases.back().elapsed = phase_elapsed();
  ck.state.command_line = req_.command_line;
  if (scaler_) {
    ck.state.loss_scale = scaler_->scale();
    ck.state.loss_scale_good_steps = scaler_->good_steps();
  }
  ck.vocab = vocab_;
  ck.model = model::model_tensors(model_);
  ck.optimizer = adam_->state();
  ck.state.world_size = dist_.world;
  // The streams' memories of every rank and chunk, as one; every rank's dropout stream.
  model::Memory mine = model::Memory::concat_rows(memories_);
  for (auto& layer : mine.layers) {
    if (layer.hidden.defined()) layer.hidden = torch::cat(comm_->all_gather(layer.hidden.contiguous(), "gathering the memories"), 0);
    if (layer.compressed.defined())
      layer.compressed = torch::cat(comm_->all_gather(layer.compressed.contiguous(), "gathering the compressed memories"), 0);
  }
  mine.to_tensors(&ck.memory);
  checkpoint::TensorList states;
  gen_.to_tensors(&states);
  for (const auto& [name, t] : states) {
    if (name.rfind("dropout_", 0) != 0) {
      ck.rng.emplace_back(name, t);
      continue;
    }
    const auto all = comm_->all_gather(t, "gathering the generator states");
    for (int r = 0; r < dist_.world; ++r) ck.rng.emplace_back(Generators::rank_name(name, r), all[static_cast<size_t>(r)]);
  }
  return ck;
}

// The one checkpoint a stream (stdout, a FIFO) gets: the run's last, at its end or on a stop signal.
// A reader that is gone (a dropped ssh, a failed next stage) does not take the run with it: the
// checkpoint goes to a file of its own, named in the error.
void Trainer::save_to_stream() {
  auto ck = snapshot();
  if (!leader()) return;
  try {
    checkpoint::save(req_.output, ck, true);
  } catch (const Error& e) {
    const std::string name = req_.tool + ".step" + std::to_string(state_.step) + "." + std::to_string(getpid()) + ".h5";
    std::string kept;
    for (const std::string& dir : {std::string("."), std::filesystem::temp_directory_path().string()}) {
      try {
        checkpoint::save(dir + "/" + name, ck, false);
        kept = dir + "/" + name;
        break;
      } catch (const Error&) {
        // an unwritable directory: the next one
      }
    }
    if (kept.empty()) throw;
    XL_FAIL(e.code(), e.what() << "; the checkpoint of step " << state_.step << " is kept in " << kept);
  }
}

std::string Trainer::save_at_stop() {
  if (!saved_this_step()) save(false);  // a stop at a validation step wrote it twice
  check_last_save();
  if (!io::is_stream(req_.output)) return "resume with --resume -o " + req_.output;
  save_to_stream();
  return "its checkpoint went to " + std::string(io::is_stdio(req_.output) ? "<stdout>" : req_.output);
}

void Trainer::save(bool best) {
  if (io::is_stream(req_.output)) return;  // a checkpoint on stdout or a FIFO is written once, at the end
  auto ck = snapshot();
  snapshot_step_ = state_.step;
  if (!leader()) return;
  const std::string best_file = best ? best_path(req_.output) : "";
  try {
    // A failed write leaves the previous file as it was (temp file + rename).
    checkpoint::save(req_.output, ck, true);
    // The best checkpoint is this same file: a second name costs nothing, where a second copy
    // wrote the whole checkpoint again (0.5 GB for base) at every improving validation.
    if (!best_file.empty() && !io::link_as(req_.output, best_file)) checkpoint::save(best_file, ck, true);
  } catch (const Error& e) {
    if (e.code() != kExitIoErr || cfg_.on_save_error != "continue") throw;
    save_failed_ = true;
    XL_WARN(e.what() << "; training goes on (--on-save-error continue)"
                     << (saved_once_ ? ", the last good checkpoint is from step " + std::to_string(saved_step_) : ""));
    metrics_.write("save_failed", {{"step", state_.step}, {"path", req_.output}, {"error", e.what()}});
    return;
  }
  saved_once_ = true;
  save_failed_ = false;
  saved_step_ = state_.step;
  nlohmann::json ev = {{"step", state_.step}, {"path", req_.output}};
  if (!best_file.empty()) ev["best"] = best_file;
  metrics_.write("checkpoint", ev);
}

void Trainer::check_last_save() const {
  XL_CHECK(!save_failed_, kExitIoErr,
           req_.output << ": the checkpoint of step " << state_.step << " could not be written"
                       << (saved_once_ ? "; the last good one is from step " + std::to_string(saved_step_) : ""));
}

}  // namespace xl::train
