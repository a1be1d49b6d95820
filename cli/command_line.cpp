#include "command_line.hpp"

// SimGrid's version where its headers are (not in the GPU machine's backend-only build).
#if __has_include(<simgrid/version.h>)
#include <xbt/base.h>  // simgrid/version.h uses its macros without including it
#include <simgrid/version.h>
#define PARTUNE_SIMGRID_VERSION_TEXT \
  fmt::format("SimGrid {}.{}.{}", SIMGRID_VERSION_MAJOR, SIMGRID_VERSION_MINOR, SIMGRID_VERSION_PATCH)
#else
#define PARTUNE_SIMGRID_VERSION_TEXT std::string("no SimGrid in this build")
#endif

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "partune/costmodel/atomic_file.hpp"
#include "partune/costmodel/error.hpp"

#ifndef PARTUNE_VERSION
#define PARTUNE_VERSION "unknown"
#endif

namespace partune::cli {

namespace {

void error_line(const std::string& message) { std::fprintf(stderr, "partune: error: %s\n", message.c_str()); }

// argv[1] when it looks like a command name that the app does not have.
const char* unknown_command(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return nullptr;
  const auto named = app.get_subcommands([&](CLI::App* sub) { return sub->check_name(argv[1]); });
  return named.empty() ? argv[1] : nullptr;
}

std::string command_names(CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  return names;
}

// The status of a command that ended with `code`, once its standard output is flushed.
int finish(int code) {
  try {
    check_standard_output();
  } catch (const OutputError& e) {
    error_line(e.what());
    return code == kSuccess ? kFailedRun : code;
  }
  return code;
}

}  // namespace

const char* exit_status_help() {
  return "Exit status:\n"
         "  0  success\n"
         "  1  the command ran and its result is a failure: a validation target missed, a rank died,\n"
         "     an output that could not be written whole (disk full), an internal error\n"
         "  2  bad input or usage: an unknown command or option, an option out of its range, a job\n"
         "     file with a bad key or value, an output path that cannot be written\n"
         "  3  nothing feasible: no configuration fits the cluster\n";
}

std::string version_text() {
  std::string text = fmt::format("partune {} ({}", PARTUNE_VERSION, PARTUNE_SIMGRID_VERSION_TEXT);
#ifdef PARTUNE_TORCH_VERSION
  text += ", LibTorch " PARTUNE_TORCH_VERSION;
#else
  text += ", no LibTorch backend";
#endif
  return text + ")";
}

void describe_program(CLI::App& app) {
  app.set_version_flag("--version", version_text(), "print partune's version and those of SimGrid and LibTorch");
  app.footer(exit_status_help());
}

int run_command_line(CLI::App& app, int argc, char** argv) {
  if (const char* name = unknown_command(app, argc, argv)) {
    error_line(fmt::format("unknown command '{}' (the commands: {}; partune --help)", name, command_names(app)));
    return kBadInput;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return finish(app.exit(e));
  } catch (const CLI::ParseError& e) {
    if (argc < 2) {
      error_line(fmt::format("a command is required (the commands: {}; partune --help)", command_names(app)));
      return kBadInput;
    }
    // The command the error is about: the innermost one parsed ("bench estimate").
    std::string command = "partune";
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      command += " " + sub->get_name();
    }
    error_line(fmt::format("{} ({} --help lists the options)", e.what(), command));
    return kBadInput;
  } catch (const ScenarioError& e) {
    error_line(e.what());
    return kBadInput;
  } catch (const OutputError& e) {
    error_line(e.what());
    return e.bad_path() ? kBadInput : kFailedRun;
  } catch (const Exit& e) {
    return finish(e.code);
  } catch (const std::exception& e) {
    error_line(e.what());
    return kFailedRun;
  }
  return finish(kSuccess);
}

}  // namespace partune::cli
