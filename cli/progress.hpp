#pragma once
// A one-line progress indicator on standard error, redrawn in place (only when it is a
// terminal: callers check isatty).
namespace partune::cli {

// total <= 0: an open-ended count ("12288 estimated").
void progress_bar(long done, long total, const char* what);

}  // namespace partune::cli
