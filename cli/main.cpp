// partune: how should this model be split across these machines, and how fast will it train?
#include <cstdio>
#include <exception>

#include "commands.hpp"
#include "partune/costmodel/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"partune: simulate, search and run parallel training configurations"};
  app.require_subcommand(1);
  partune::cli::register_estimate(app);
  partune::cli::register_simulate(app);
  partune::cli::register_search(app);
  partune::cli::register_reproduce(app);
  partune::cli::register_bench(app);
#ifdef PARTUNE_HAVE_TORCH
  partune::cli::register_run(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const partune::ScenarioError& e) {
    std::fprintf(stderr, "partune: error: %s\n", e.what());
    return 2;
  } catch (const partune::cli::Exit& e) {
    return e.code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "partune: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
