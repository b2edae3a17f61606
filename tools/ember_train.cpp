// ember-train: runs one experiment described by a JSON config (train/config.h) in a run directory
// (train/trainer.h). Written against ember's public API only.
//
//   ember-train CONFIG.json [key.path=value ...] [--print-config] [--help]
//
// Exit status: 0 finished (all epochs or an early stop), 1 runtime error (unreadable data files,
// a failed checkpoint), 2 bad command line or config (nothing has been written then: the config,
// its data files, the devices and the run directory are checked before any work), 128 + the
// signal number after SIGTERM/SIGINT (checkpoints/last.ckpt written; checkpoint.resume=auto
// continues the run). Errors are the user's line alone; EMBER_DEBUG=1 adds the source location.
#include <ember/ember.h>
#include <ember/train/run_dir.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

using namespace ember;

namespace {

constexpr int kExitRuntime = 1, kExitUsage = 2;

void print_usage(std::FILE* out) {
  std::fputs(
      "usage: ember-train CONFIG.json [key.path=value ...] [--print-config] [--help]\n"
      "\n"
      "Trains the experiment CONFIG.json describes and writes a run directory (output.run_dir, or\n"
      "output.dir/<name>-<timestamp>/): config.json, metrics.jsonl, summary.json, log.txt, checkpoints/.\n"
      "\n"
      "  key.path=value   override a config key after the file, typed by the schema:\n"
      "                   optim.lr=0.05  epochs=20  data.augment=true  schedule.milestones=30,60\n"
      "  --print-config   print the resolved config (file + overrides, defaults filled in) and exit\n"
      "  --help           print this and exit\n"
      "\n"
      "SIGTERM or SIGINT: the current step finishes, checkpoints/last.ckpt is written and the program\n"
      "exits with 128 + the signal number; run it again with checkpoint.resume=auto (and the same\n"
      "output.run_dir) to continue. Exit status 2: bad command line or config, 1: runtime error.\n"
      "\n"
      "Config keys:\n",
      out);
  std::string line = " ";
  for (const std::string& key : train::config_key_paths()) {
    if (line.size() + key.size() + 1 > 96) {
      std::fprintf(out, "%s\n", line.c_str());
      line = " ";
    }
    line += " " + key;
  }
  std::fprintf(out, "%s\n", line.c_str());
}

struct Args {
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false;
  bool help = false;
};

// For an option such as "--epochs" (or "--lr=0.1", "--batch-size"): the config keys it may have
// meant, written as overrides ("epochs=1", "optim.lr=0.1"), the value taken from the option or the
// argument after it. Empty when no key's full path or last part matches the option's name.
std::string override_hint(const std::string& option, const char* next) {
  std::string name = option.substr(option.find_first_not_of('-'));
  std::string value = next != nullptr && next[0] != '-' ? next : "VALUE";
  if (const size_t eq = name.find('='); eq != std::string::npos) {
    value = name.substr(eq + 1);
    name.resize(eq);
  }
  for (char& c : name)
    if (c == '-') c = '_';
  std::string hint;
  for (const std::string& key : train::config_key_paths()) {
    const std::string last = key.substr(key.rfind('.') == std::string::npos ? 0 : key.rfind('.') + 1);
    if (key == name || last == name) hint += (hint.empty() ? "" : " or ") + key + "=" + value;
  }
  return hint;
}

// Returns an error message, or "" when the command line is well formed.
std::string parse_args(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      a.help = true;
    } else if (arg == "--print-config") {
      a.print_config = true;
    } else if (arg.rfind("-", 0) == 0) {
      const std::string hint = override_hint(arg, i + 1 < argc ? argv[i + 1] : nullptr);
      if (hint.empty()) return "unknown option '" + arg + "'";
      return "unknown option '" + arg + "': settings are overrides written key.path=value, here " + hint;
    } else if (a.config_path.empty() && arg.find('=') == std::string::npos) {
      a.config_path = arg;
    } else if (arg.find('=') != std::string::npos) {
      if (a.config_path.empty()) return "the config file comes first, before the override '" + arg + "'";
      a.overrides.push_back(arg);
    } else {
      return "unexpected argument '" + arg + "' after the config file; overrides are written key.path=value";
    }
  }
  if (!a.help && a.config_path.empty()) return "missing the config file (CONFIG.json)";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (const std::string err = parse_args(argc, argv, args); !err.empty()) {
    std::fprintf(stderr, "ember-train: %s\n\n", err.c_str());
    print_usage(stderr);
    return kExitUsage;
  }
  if (args.help) {
    print_usage(stdout);
    return 0;
  }

  // Validation before any work: the config (file, overrides), the data files, the devices (also
  // those of parallel.mode dp, and a launcher's variables) and the run directory.
  train::ExperimentConfig config;
  try {
    config = train::load_config(args.config_path, args.overrides);
    if (args.print_config) {
      std::fputs(train::to_json(config).c_str(), stdout);
      std::fputc('\n', stdout);
      return 0;
    }
    train::check_data_available(config.data);
    if (config.device != "auto") Device(config.device).validate();
    if (config.parallel.mode == train::ParallelMode::dp) train::data_parallel_devices(config.parallel);
    // RANK without WORLD_SIZE (or the reverse) is an error naming both.
    const auto launched = parallel::launcher_rank();
    // A global batch that does not divide into this job's ranks.
    train::resolve_batch_scaling(
        config, config.parallel.mode == train::ParallelMode::ddp && launched ? launched->world_size : 1);
    // A named run directory that already holds a run (a timestamped one is new).
    if (!config.output.run_dir.empty())
      train::checkpoint_to_resume(train::RunPaths(config.output.run_dir), config.checkpoint.resume);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember-train: %s\n", error_text(e).c_str());
    return kExitUsage;
  }

  try {
    train::Trainer trainer(config, args.overrides);
    const train::TrainOutcome out = trainer.run();
    std::fflush(stdout);
    if (out.exit_code != 0)
      std::fprintf(stderr, "ember-train: stopped by %s; run directory %s\n", train::signal_name(out.exit_code - 128),
                   out.run_dir.c_str());
    return out.exit_code;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "ember-train: error: %s\n", error_text(e).c_str());
    return kExitRuntime;
  }
}
