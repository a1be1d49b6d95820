#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "partune/costmodel/error.hpp"

namespace partune::cli {

int run_app(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
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
