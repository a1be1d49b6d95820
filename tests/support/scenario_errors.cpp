#include "scenario_errors.hpp"

#include <catch2/catch.hpp>

#include <exception>

namespace partune::testing {

ScenarioError expect_scenario_error(const std::function<void()>& f, const std::string& what) {
  try {
    f();
  } catch (const ScenarioError& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL(what << (what.empty() ? "" : ": ") << "expected ScenarioError, got another exception: " << e.what());
  }
  FAIL(what << (what.empty() ? "" : ": ") << "expected ScenarioError, nothing was thrown (accepted)");
  return ScenarioError("", "", "");
}

}  // namespace partune::testing
