#pragma once
// Presentation of `partune run`: the run's header, a line per step, the --json report and
// the measured trace in the simulator's layout. No computation happens here; no LibTorch
// header (backend/trainer.hpp hides it).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "partune/backend/trainer.hpp"

namespace partune::cli {

// What runs against the job's model and why (first line), on how many ranks, with which
// model, batch, data and program (rank 0's).
std::string run_header_text(const Job& job, const backend::Trainer& trainer, const ScaleOptions& scale);
std::string step_table_header();
std::string step_line(const backend::StepReport& r);
// The --json object: the job as run and every step's loss, time and per-rank peaks.
nlohmann::json run_json(const Job& job, const backend::Trainer& trainer,
                        const std::vector<backend::StepReport>& reports, int first_step);

}  // namespace partune::cli
