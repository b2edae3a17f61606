// ember-report: turns run directories (written by ember-train) into a Markdown table and SVG plots.
//
//   ember-report RUN_DIR... [--out DIR] [--by KEY]
//   ember-report --scaling RUN_DIR... [--out DIR]
//   ember-report --profile RUN_DIR [--out DIR]
//
// Writes DIR/report.md (the table, one line per run, the plots linked), DIR/loss.svg (train and
// test loss per epoch), DIR/accuracy.svg (test accuracy per epoch), DIR/throughput.svg (images/s
// per run), DIR/accuracy_time.svg (test accuracy over wall time, per run) and, when a run trained
// in fp16, DIR/loss_scale.svg (log2 of the loss scale per epoch), when a run measured its GPU,
// DIR/gpu.svg (utilisation per epoch); DIR defaults to report/ in the current directory. Prints the
// table. --by KEY groups the runs by a config key of their config.json (a column of it, the runs
// in group order, and a table per group's value: runs, best accuracy, images/s).
// With --scaling: DIR/scaling.md (runs by world size: epoch time, images/s, speedup, efficiency,
// exposed communication, accuracy, a verdict per run; report/scaling.h), DIR/scaling.svg and
// DIR/scaling-efficiency.svg; prints the table, its notes and the verdicts.
// With --profile: RUN_DIR/profile/trace.json (or a trace file given instead of the directory), one
// or several ranks: DIR/profile.md (the per-span table and the verdict, report/profile.h) and
// DIR/profile_timeline.svg (the last kept step, ranks as rows); prints the table and the verdict.
//
// Exit status: 0 done, 1 a run directory could not be read (the message names the file), the
// report could not be written, or --scaling runs that cannot be compared (all of one world size,
// or one without summary.json), or a trace that cannot be read (the message names the file and the
// JSON path), 2 bad command line (including --scaling with fewer than two runs, --profile with
// other than one run directory, --profile with --scaling).
#include <ember/ember.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "report/profile.h"
#include "report/report.h"
#include "report/scaling.h"

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

const char* const kUsage =
    "usage: ember-report RUN_DIR... [--out DIR] [--by KEY]\n"
    "       ember-report --scaling RUN_DIR... [--out DIR]\n"
    "       ember-report --profile RUN_DIR [--out DIR]\n"
    "\n"
    "Reads each run directory (summary.json and metrics.jsonl, as ember-train writes them; a run\n"
    "without summary.json is read from metrics.jsonl alone) and writes into DIR:\n"
    "  report.md        a table: run, device, devices, epochs, best accuracy, mean epoch time,\n"
    "                   images/s, and speedup and parallel efficiency relative to the run with\n"
    "                   the fewest devices (when the runs differ in device count)\n"
    "  loss.svg         train and test loss per epoch\n"
    "  accuracy.svg     test accuracy per epoch\n"
    "  throughput.svg   images/s per run\n"
    "  loss_scale.svg   the fp16 loss scale per epoch (only when a run trained in fp16)\n"
    "  accuracy_time.svg  test accuracy over wall time (training + evaluation seconds), per run\n"
    "  gpu.svg          GPU utilisation per epoch (only when a run measured its GPU through NVML;\n"
    "                   the table then has a GPU busy column)\n"
    "The table is also printed. With --by KEY (a config key, e.g. precision, optim.lr,\n"
    "resolved.global_batch_size) the table gets a KEY column, the runs are ordered by its value,\n"
    "and a second table gives each value's runs: count, mean and range of best accuracy,\n"
    "mean images/s and epoch time.\n"
    "\n"
    "With --scaling, for runs of one experiment on different world sizes (processes or devices):\n"
    "  scaling.md              runs sorted by world size: mean epoch time and images/s (epoch 1 left\n"
    "                          out as warm-up when a run has 3 or more), speedup and efficiency\n"
    "                          against the smallest world, gradient all-reduce time per epoch and\n"
    "                          the part the step waited for (exposed), the part hidden behind\n"
    "                          backward, final and best test accuracy, and a verdict per run\n"
    "  scaling.svg             speedup over world size, with the ideal line\n"
    "  scaling-efficiency.svg  parallel efficiency over world size\n"
    "docs/scaling.md explains how to read it.\n"
    "\n"
    "With --profile, for one run profiled with profile.enabled=true (or an example's --profile DIR):\n"
    "  profile.md              the table of spans (calls, total and self time) of RUN_DIR/profile/trace.json\n"
    "                          (or of a trace file given instead), all ranks together, and the verdict:\n"
    "                          input-, communication-, compute- or launch-bound, or the optimizer, with\n"
    "                          the measured shares and the config keys to try (docs/profiling.md)\n"
    "  profile_timeline.svg    the last kept step: ranks as rows, a row per thread, spans by category\n"
    "\n"
    "options:\n"
    "  --scaling   the scaling report instead of the run report\n"
    "  --profile   the profile report of one run\n"
    "  --by KEY    group the runs by config key KEY (run report only)\n"
    "  --out DIR   output directory (default: report)\n"
    "  -h, --help  this text\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "ember-report: %s\n\n%s", message.c_str(), kUsage);
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> run_dirs;
  std::string out_dir = "report", by;
  bool scaling = false, profile = false;
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
    } else if (arg == "--scaling") {
      scaling = true;
    } else if (arg == "--profile") {
      profile = true;
    } else if (arg == "--out") {
      if (i + 1 >= argc) return usage_error("--out needs a directory");
      out_dir = argv[++i];
    } else if (arg.rfind("--out=", 0) == 0) {
      out_dir = arg.substr(6);
    } else if (arg == "--by") {
      if (i + 1 >= argc) return usage_error("--by needs a config key (e.g. precision)");
      by = argv[++i];
    } else if (arg.rfind("--by=", 0) == 0) {
      by = arg.substr(5);
    } else {
      return usage_error("unknown flag '" + arg + "'");
    }
  }
  if (run_dirs.empty()) return usage_error("no run directories given");
  if (out_dir.empty()) return usage_error("--out needs a non-empty directory");
  if (!by.empty() && (profile || scaling))
    return usage_error("--by groups the runs of the run report: not with --profile or --scaling");
  if (profile && scaling) return usage_error("--profile and --scaling are separate reports: give one of them");
  if (profile && run_dirs.size() != 1)
    return usage_error("--profile reads one run directory (its profile/trace.json holds every rank), got " +
                       std::to_string(run_dirs.size()));
  if (scaling && run_dirs.size() < 2)
    return usage_error("--scaling compares runs on different world sizes: give two or more run directories");

  try {
    if (profile) {
      const std::string d = out_dir.back() == '/' ? out_dir : out_dir + "/";
      std::fputs(ember::report::write_profile_report(run_dirs[0], out_dir).c_str(), stdout);
      std::printf("wrote %sprofile.md, %sprofile_timeline.svg\n", d.c_str(), d.c_str());
      return 0;
    }
    const std::vector<ember::report::RunRecord> runs = ember::report::read_runs(run_dirs);
    const std::string d = out_dir.back() == '/' ? out_dir : out_dir + "/";
    if (scaling) {
      const std::string text = ember::report::write_scaling_report(runs, out_dir);
      std::fputs(text.c_str(), stdout);
      std::printf("wrote %sscaling.md, %sscaling.svg, %sscaling-efficiency.svg\n", d.c_str(), d.c_str(), d.c_str());
      return 0;
    }
    const std::string table = ember::report::write_report(runs, out_dir, by);
    std::fputs(table.c_str(), stdout);
    std::string wrote;
    for (const std::string& f : ember::report::report_files(runs)) wrote += (wrote.empty() ? "" : ", ") + d + f;
    std::printf("wrote %s\n", wrote.c_str());
  } catch (const std::exception& e) {  // a bad run directory or trace, a filesystem error from the OS
    std::fprintf(stderr, "ember-report: %s\n", ember::error_text(e).c_str());
    return kExitError;
  }
  return 0;
}
