// ember-report's runs side by side (tools/report/report.h): config.json read with each run, --by KEY
// grouping (group order, the group table, an unknown key named), the accuracy-over-wall-time plot,
// and the GPU busy column and plot only where a run measured its GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "report/report.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

using namespace ember;
using namespace ember::report;
using ember::testing::error_of;
using ember::testing::read_text;
using ember::testing::TempDir;
namespace fs = std::filesystem;

namespace {

// A run directory: summary.json, metrics.jsonl (epochs of 2 s training + 1 s evaluation), and a
// config.json with `precision` unless it is empty.
std::string make_run(const fs::path& root, const std::string& name, const std::string& precision,
                     std::vector<double> acc, double ips, bool gpu = false) {
  const fs::path dir = root / name;
  fs::create_directories(dir);
  train::RunSummary s;
  s.name = name;
  s.device = "cpu";
  s.epochs_run = static_cast<int64_t>(acc.size());
  s.best_test_acc = *std::max_element(acc.begin(), acc.end());
  s.images_per_second = ips;
  std::ofstream(dir / "summary.json") << train::to_json(s);
  std::ofstream m(dir / "metrics.jsonl");
  for (size_t i = 0; i < acc.size(); ++i) {
    train::EpochMetrics e;
    e.epoch = static_cast<int64_t>(i + 1);
    e.test_acc = acc[i];
    e.epoch_seconds = 2;
    e.eval_seconds = 1;
    if (gpu) e.gpu_util_percent = 40 + 10 * static_cast<double>(i);
    m << train::to_json_line(e) << "\n";
  }
  if (!precision.empty())
    std::ofstream(dir / "config.json") << R"({"name": ")" << name << R"(", "precision": ")" << precision
                                       << R"(", "optim": {"lr": 0.1}, "provenance": {"host": "vm"}})";
  return dir.string();
}

}  // namespace

TEST_CASE("report: config.json is read with each run, flattened, without provenance", "[cpu]") {
  TempDir tmp;
  const RunRecord r = read_run(make_run(tmp.path(), "a", "bf16", {0.5}, 100));
  CHECK(config_value(r, "precision") == "bf16");
  CHECK(config_value(r, "optim.lr") == "0.1");
  CHECK(config_value(r, "provenance.host") == "?");
  CHECK(config_value(read_run(make_run(tmp.path(), "b", "", {0.5}, 100)), "precision") == "?");
}

TEST_CASE("report: --by groups the runs by a config key", "[cpu]") {
  TempDir tmp;
  const std::vector<RunRecord> runs = read_runs(
      {make_run(tmp.path(), "f32-a", "fp32", {0.5, 0.75}, 100), make_run(tmp.path(), "b16-a", "bf16", {0.5, 0.5}, 300),
       make_run(tmp.path(), "f32-b", "fp32", {0.25, 0.5}, 200), make_run(tmp.path(), "none", "", {0.1}, 50)});
  const std::vector<RunGroup> groups = group_runs(runs, "precision");
  REQUIRE(groups.size() == 3);
  CHECK(groups[0].value == "bf16");
  CHECK(groups[1].value == "fp32");
  CHECK(groups[1].runs.size() == 2);
  CHECK(groups[2].value == "?");  // no config.json: last
  const std::string table = group_table(runs, "precision");
  // fp32: best 0.75 and 0.5 -> mean 0.625; images/s (100 + 200) / 2.
  CHECK_THAT(table, Catch::Contains("| fp32      |    2 |          0.6250 |      0.5000-0.7500 |             150 |"));
  CHECK_THAT(error_of([&] { group_runs(runs, "optim.lrr"); }),
             Catch::Contains("--by optim.lrr: no run's config.json has this key (keys include "));
  const fs::path out = tmp.path() / "report";
  const std::string printed = write_report(runs, out.string(), "precision");
  const std::string md = read_text(out / "report.md");
  CHECK_THAT(md, Catch::Contains("## By precision") && Catch::Contains(table));
  CHECK_THAT(printed, Catch::Contains(table));
  // The run table has the key's column, the runs in group order.
  CHECK(md.find("| b16-a ") < md.find("| f32-a "));
  CHECK(md.find("| f32-b ") < md.find("| none "));
  CHECK_THAT(md, Catch::Contains("| run   | precision |"));
  CHECK_THAT(read_text(out / "accuracy.svg"), Catch::Contains(">f32-a [precision=fp32]</text>"));
  // Numbers group in numeric order.
  CHECK(group_runs(runs, "optim.lr").size() == 2);
}

TEST_CASE("report: test accuracy over wall time, and the GPU only where measured", "[cpu]") {
  TempDir tmp;
  const std::vector<RunRecord> cpu = read_runs({make_run(tmp.path(), "a", "fp32", {0.5, 0.75}, 100)});
  write_report(cpu, (tmp.path() / "r1").string());
  const std::string svg = read_text(tmp.path() / "r1" / "accuracy_time.svg");
  CHECK_THAT(svg, Catch::Contains(">seconds</text>") && Catch::Contains("<polyline"));
  CHECK_THAT(read_text(tmp.path() / "r1" / "report.md"), Catch::Contains("](accuracy_time.svg)"));
  CHECK_FALSE(fs::exists(tmp.path() / "r1" / "gpu.svg"));
  CHECK_THAT(markdown_table(cpu), !Catch::Contains("GPU busy"));
  CHECK(std::isnan(mean_gpu_util(cpu[0])));

  const std::vector<RunRecord> both =
      read_runs({make_run(tmp.path(), "g", "fp32", {0.5, 0.75}, 100, /*gpu=*/true), cpu[0].dir});
  CHECK(mean_gpu_util(both[0]) == 45);
  const std::string table = markdown_table(both);
  CHECK_THAT(table,
             Catch::Contains("| GPU busy |") && Catch::Contains("|      45% |") && Catch::Contains("|        - |"));
  write_report(both, (tmp.path() / "r2").string());
  CHECK(fs::exists(tmp.path() / "r2" / "gpu.svg"));
  CHECK(report_files(both).back() == "gpu.svg");
}
