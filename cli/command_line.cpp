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

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.hpp"
#include "partune/costmodel/atomic_file.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/nearest_name.hpp"
#include "partune/costmodel/printable.hpp"

#ifndef PARTUNE_VERSION
#define PARTUNE_VERSION "unknown"
#endif

namespace partune::cli {

namespace {

// Raw bytes of a file or an argument reach the terminal escaped (\xff).
void error_line(const std::string& message) {
  std::fprintf(stderr, "partune: error: %s\n", escape_unprintable(message).c_str());
}

// argv[1] when it looks like a command name that the app does not have.
const char* unknown_command(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return nullptr;
  const auto named = app.get_subcommands([&](CLI::App* sub) { return sub->check_name(argv[1]); });
  return named.empty() ? argv[1] : nullptr;
}

// The commands --help lists (not the hidden ones, such as simulate-outcome).
std::string command_names(CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App* s) { return !s->get_group().empty(); }))
    names += (names.empty() ? "" : ", ") + sub->get_name();
  return names;
}

// For an argument `command` does not take: the first "--name" it has no option of, and
// the nearest option it has ("; did you mean '--search'?"); "" when none is near.
std::string option_suggestion(const CLI::App& command, int argc, char** argv) {
  std::vector<std::string> names;
  for (const CLI::Option* o : command.get_options())
    for (const std::string& name : o->get_lnames()) names.push_back("--" + name);
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) continue;
    arg = arg.substr(0, arg.find('='));
    if (std::find(names.begin(), names.end(), arg) != names.end()) continue;
    const std::string near = nearest_name(arg, names);
    return near.empty() ? "" : "; did you mean '" + near + "'?";
  }
  return "";
}

// CLI11's help with an option's default apart from its range: "--steps INT:a whole
// number from 3 to 10000" and "steps per run (default: 6)", not "... to 10000=6".
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_opts(const CLI::Option* opt) const override {
    if (!opt->get_option_text().empty()) return " " + opt->get_option_text();
    std::string out;
    if (opt->get_type_size() != 0) {
      if (!opt->get_type_name().empty()) out += " " + get_label(opt->get_type_name());
      if (opt->get_expected_max() == CLI::detail::expected_max_vector_size) out += " ...";
      else if (opt->get_expected_min() > 1) out += " x " + std::to_string(opt->get_expected());
      if (opt->get_required()) out += " " + get_label("REQUIRED");
    }
    if (!opt->get_envname().empty()) out += " (" + get_label("Env") + ":" + opt->get_envname() + ")";
    return out;
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    const std::string& fallback = opt->get_default_str();
    if (opt->get_type_size() == 0 || fallback.empty()) return opt->get_description();
    return fmt::format("{} (default: {})", opt->get_description(), fallback);
  }
};

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
         "  3  nothing feasible: no configuration fits the cluster (search, validate --search), or the job\n"
         "     does not fit (estimate --require-fit; without it a job that does not fit is reported, status 0)\n";
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
  app.formatter(std::make_shared<HelpFormatter>());
}

int run_command_line(CLI::App& app, int argc, char** argv) {
  if (const char* name = unknown_command(app, argc, argv)) {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App* s) { return !s->get_group().empty(); }))
      names.push_back(sub->get_name());
    const std::string near = nearest_name(name, names);
    error_line(fmt::format("unknown command '{}'{} (the commands: {}; partune --help)", name,
                           near.empty() ? "" : "; did you mean '" + near + "'?", command_names(app)));
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
    const CLI::App* innermost = &app;
    while (!innermost->get_subcommands().empty()) {
      innermost = innermost->get_subcommands().front();
      command += " " + innermost->get_name();
    }
    const bool extra = dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr;
    error_line(fmt::format("{}{} ({} --help lists the options)", e.what(),
                           extra ? option_suggestion(*innermost, argc, argv) : "", command));
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
