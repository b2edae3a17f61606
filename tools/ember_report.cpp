// ember-report: turns run directories (written by ember-train) into a Markdown table and SVG plots.
//
//   ember-report RUN_DIR... [--out DIR]
//
// Writes DIR/report.md (the table, one line per run, the plots linked), DIR/loss.svg (train and
// test loss per epoch), DIR/accuracy.svg (test accuracy per epoch) and DIR/throughput.svg
// (images/s per run); DIR defaults to report/ in the current directory. Prints the table.
//
// Exit status: 0 done, 1 a run directory could not be read (the message names the file) or the
// report could not be written, 2 bad command line.
#include <ember/ember.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "report/report.h"

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

const char* const kUsage =
    "usage: ember-report RUN_DIR... [--out DIR]\n"
    "\n"
    "Reads each run directory (summary.json and metrics.jsonl, as ember-train writes them; a run\n"
    "without summary.json is read from metrics.jsonl alone) and writes into DIR:\n"
    "  report.md        a table: run, device, devices, epochs, best accuracy, mean epoch time,\n"
    "                   images/s, and speedup and parallel efficiency relative to the run with\n"
    "                   the fewest devices (when the runs differ in device count)\n"
    "  loss.svg         train and test loss per epoch\n"
    "  accuracy.svg     test accuracy per epoch\n"
    "  throughput.svg   images/s per run\n"
    "The table is also printed.\n"
    "\n"
    "options:\n"
    "  --out DIR   output directory (default: report)\n"
    "  -h, --help  this text\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "ember-report: %s\n\n%s", message.c_str(), kUsage);
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> run_dirs;
  std::string out_dir = "report";
  bool flags_done = false;  // after "--" every argument is a run directory
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (flags_done || arg.empty() || arg[0] != '-' || arg == "-") {
      run_dirs.push_back(arg);
    } else if (arg == "--") {
      flags_done = true;
    } else if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--out") {
      if (i + 1 >= argc) return usage_error("--out needs a directory");
      out_dir = argv[++i];
    } else if (arg.rfind("--out=", 0) == 0) {
      out_dir = arg.substr(6);
    } else {
      return usage_error("unknown flag '" + arg + "'");
    }
  }
  if (run_dirs.empty()) return usage_error("no run directories given");
  if (out_dir.empty()) return usage_error("--out needs a non-empty directory");

  try {
    const std::vector<ember::report::RunRecord> runs = ember::report::read_runs(run_dirs);
    const std::string table = ember::report::write_report(runs, out_dir);
    std::fputs(table.c_str(), stdout);
    const std::string d = out_dir.back() == '/' ? out_dir : out_dir + "/";
    std::printf("wrote %sreport.md, %sloss.svg, %saccuracy.svg, %sthroughput.svg\n", d.c_str(), d.c_str(), d.c_str(),
                d.c_str());
  } catch (const ember::Error& e) {  // a bad run directory: the message alone, without the check's location
    std::fprintf(stderr, "ember-report: %s\n", e.message().c_str());
    return kExitError;
  } catch (const std::exception& e) {  // filesystem errors from the OS
    std::fprintf(stderr, "ember-report: %s\n", e.what());
    return kExitError;
  }
  return 0;
}
