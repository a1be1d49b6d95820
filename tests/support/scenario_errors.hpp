#pragma once
// The ScenarioError a loader throws, for tests of refusals (partune_test_support).
#include <functional>
#include <string>

#include "partune/costmodel/error.hpp"

namespace partune::testing {

// Runs `f` and returns the ScenarioError it throws; fails the test when it throws nothing
// or another exception (`what` names what was run in the failure).
ScenarioError expect_scenario_error(const std::function<void()>& f, const std::string& what = "");

}  // namespace partune::testing
