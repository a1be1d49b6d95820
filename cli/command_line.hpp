#pragma once
// What every partune command shares at the edge: the exit-status table (printed by
// --help, documented in the README), --version, and the mapping of errors to statuses.
#include <CLI/CLI.hpp>

namespace partune::cli {

// Exit statuses of every partune command (the README's table says the same).
enum ExitStatus : int {
  kSuccess = 0,
  kFailedRun = 1,   // the command ran, and its result is a failure the user asked to hear of
  kBadInput = 2,    // bad input or usage: options, job files, output paths
  kInfeasible = 3,  // nothing feasible: no configuration fits
};

// The table as --help prints it.
const char* exit_status_help();

// "partune 0.1.0 (SimGrid 3.32.0, LibTorch 1.13.1)": what --version prints.
std::string version_text();

// Adds --version, the exit-status table and the help layout (an option's default apart
// from its range) to the top-level app; sub-commands added after it inherit the last two.
void describe_program(CLI::App& app);

// Parses and runs the chosen sub-command; maps every error to the table's status with
// one line on standard error, and fails a command whose standard output could not be
// written (a full disk, a closed pipe).
int run_command_line(CLI::App& app, int argc, char** argv);

}  // namespace partune::cli
