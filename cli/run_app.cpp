#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "partune/costmodel/error.hpp"

namespace partune::cli {

int run_app(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and the like: CLI11 prints them. A usage mistake (an unknown flag, a value out
    // of range) is bad input: one line, exit status 2.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "partune: error: %s\n", e.what());
    return 2;
  } catch (const ScenarioError& e) {
    std::fprintf(stderr, "partune: error: %s\n", e.what());
    return 2;
  } catch (const Exit& e) {
    return e.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "partune: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace partune::cli
