#pragma once
// The knobs of the search space, listed once: each knob's key (the job file's name under
// `parallel:`), how its values are parsed from `--fix key=v1,v2` and the job's `search:`
// section, how a value is read from and written into a job, and how it shows in a
// candidate's description. restrict_space, pin_from_job, matches, apply and describe all
// go through this table; a new knob is one entry here, one field of SearchSpace and of
// Point, and one loop of enumerate().
#include <functional>
#include <string>
#include <vector>

#include "partune/costmodel/job.hpp"

namespace partune::search {

struct SearchSpace;
struct Point;

struct Knob {
  const char* key;
  // Replaces the knob's allowed values with the parsed `values`; throws
  // std::invalid_argument naming the key and the value it cannot read.
  std::function<void(SearchSpace&, const std::vector<std::string>& values)> restrict;
  // Pins the knob to the job's own value.
  std::function<void(SearchSpace&, const Job&)> pin;
  // Whether the job's value is among the space's allowed values (an empty list allows all).
  std::function<bool(const SearchSpace&, const Job&)> allows;
  // The job's value as text that `restrict` reads back.
  std::function<std::string(const Job&)> value;
  // Writes the point's value of this knob into the job. Knobs are applied in table
  // order: the micro-batch size needs the degrees, checkpointed layers the checkpointing.
  std::function<void(const Point&, Job&)> apply;
  // The knob's part of a candidate's description ("" when it shows nothing).
  std::function<std::string(const Job&)> describe;
};

// Every knob, in the order of a candidate's description.
const std::vector<Knob>& knobs();
// The knob named `key` ("parallel." prefix allowed); throws std::invalid_argument listing
// the keys when there is none.
const Knob& knob(const std::string& key);
// "pipeline_parallel_degree, tensor_parallel_degree, ..." for messages.
std::string knob_keys();

}  // namespace partune::search
