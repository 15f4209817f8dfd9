// Each `gpumem` subcommand lives in its own file and adds itself to the CLI here.
#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace gpumem::cli {

// Exit statuses shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;   // the job ran and found a failure (a target missed)
inline constexpr int kExitBadInput = 2;  // bad arguments or an unreadable / corrupt input

// One line on stderr ("gpumem COMMAND: message", line breaks folded), then kExitBadInput:
// the one way bad input ends.
int BadInput(const char* command, const std::string& message);

// Each adds its subcommand to `app`; when it runs, it stores its exit status in *status.
void AddReplayCommand(CLI::App& app, int* status);
void AddDumpCommand(CLI::App& app, int* status);
void AddReportCommand(CLI::App& app, int* status);
void AddExportCommand(CLI::App& app, int* status);
void AddRunCommand(CLI::App& app, int* status);
void AddDoctorCommand(CLI::App& app, int* status);
void AddDiffCommand(CLI::App& app, int* status);

}  // namespace gpumem::cli
