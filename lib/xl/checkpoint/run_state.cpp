#include "xl/checkpoint/run_state.h"

#include "xl/util/error.h"

namespace xl::checkpoint {

double RunState::elapsed() const {
  double s = 0;
  for (const auto& p : phases) s += p.elapsed;
  return s;
}

nlohmann::json RunState::to_json() const {
  nlohmann::json phase_list = nlohmann::json::array();
  for (const auto& p : phases)
    phase_list.push_back({{"phase", p.phase}, {"start_step", p.start_step}, {"start_tokens", p.start_tokens},
                          {"elapsed", p.elapsed}, {"schedule", p.schedule}});
  nlohmann::json j = {{"step", step}, {"tokens_seen", tokens_seen}, {"epoch", epoch}, {"offset", offset},
                      {"schedule_origin", schedule_origin}, {"last_lr", last_lr}, {"phases", phase_list},
                      {"best_loss", best_loss ? nlohmann::json(*best_loss) : nlohmann::json()},
                      {"best_step", best_step}, {"history", history}, {"world_size", world_size},
                      {"command_line", command_line}};
  if (loss_scale > 0)
    j.update({{"loss_scale", loss_scale}, {"loss_scale_good_steps", loss_scale_good_steps}, {"skipped_steps", skipped_steps}});
  if (!imported_from.empty()) j["imported_from"] = imported_from;
  if (train_data) j["train_data"] = {{"sha256", train_data->sha256}, {"tokens", train_data->tokens}};
  return j;
}

RunState RunState::from_json(const nlohmann::json& j, const std::string& file) {
  RunState s;
  if (j.is_null()) return s;
  XL_CHECK(j.is_object(), kExitDataErr, file << ": the run state is not a JSON object");
  try {
    s.step = j.value("step", int64_t{0});
    s.tokens_seen = j.value("tokens_seen", int64_t{0});
    s.epoch = j.value("epoch", int64_t{0});
    s.offset = j.value("offset", int64_t{0});
    s.schedule_origin = j.value("schedule_origin", int64_t{0});
    s.last_lr = j.value("last_lr", 0.0);
    if (j.contains("phases"))
      for (const auto& p : j.at("phases"))
        s.phases.push_back({p.at("phase").get<std::string>(), p.value("start_step", int64_t{0}),
                            p.value("start_tokens", int64_t{0}), p.value("elapsed", 0.0),
                            p.value("schedule", nlohmann::json())});
    if (j.contains("best_loss") && j.at("best_loss").is_number()) s.best_loss = j.at("best_loss").get<double>();
    s.best_step = j.value("best_step", int64_t{-1});
    if (j.contains("history")) s.history = j.at("history").get<std::vector<std::pair<int64_t, double>>>();
    s.command_line = j.value("command_line", std::string());
    s.world_size = j.value("world_size", 1);
    s.loss_scale = j.value("loss_scale", 0.0);
    s.loss_scale_good_steps = j.value("loss_scale_good_steps", int64_t{0});
    s.skipped_steps = j.value("skipped_steps", int64_t{0});
    s.imported_from = j.value("imported_from", std::string());
    if (j.contains("train_data"))
      s.train_data = TrainData{j.at("train_data").at("sha256").get<std::string>(), j.at("train_data").at("tokens").get<int64_t>()};
  } catch (const nlohmann::json::exception&) {
    XL_FAIL(kExitDataErr, file << ": malformed run state in the checkpoint");
  }
  XL_CHECK(s.step >= 0 && s.tokens_seen >= 0 && s.epoch >= 0 && s.offset >= 0 && s.world_size >= 1, kExitDataErr,
           file << ": malformed run state in the checkpoint (negative counts)");
  return s;
}

}  // namespace xl::checkpoint
