// ember-report's library (tools/report/report.h, scaling.h, svg.h): run directories read from the
// fixtures in tests/train/fixtures/runs, the table's numbers recomputed here from the fixture
// values, SVG output checked for well-formed XML and parsed back (points map to the data through
// the axis ticks), and the report files. The scaling report reads run directories written here
// with known figures (world sizes 1, 2, 4).
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <ember/core/error.h>
#include "report/report.h"
#include "report/scaling.h"
#include "report/svg.h"
#include "support/error_of.h"
#include "support/temp_dir.h"

using namespace ember;
using namespace ember::train;
using namespace ember::report;
using ember::testing::error_of;
using ember::testing::read_text;
using ember::testing::TempDir;
namespace fs = std::filesystem;

namespace {

const fs::path kRuns = fs::path(EMBER_SOURCE_DIR) / "tests" / "train" / "fixtures" / "runs";
std::string run_dir(const std::string& name) { return (kRuns / name).string(); }

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// The table's body rows as trimmed cells (header and separator dropped); the table ends at the
// first line that is not a table row.
std::vector<std::vector<std::string>> table_rows(const std::string& table) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(table);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '|') break;
    if (n++ < 2) continue;
    std::vector<std::string> cells;
    std::string cell;
    for (size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '|' && line[i - 1] != '\\') {
        const size_t a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
        cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
        cell.clear();
      } else {
        cell += line[i];
      }
    }
    rows.push_back(cells);
  }
  return rows;
}
enum Col { kRun, kDevice, kDevices, kEpochs, kBestAcc, kEpochTime, kImages, kSpeedup, kEfficiency };

// A minimal well-formedness check for the XML these charts emit: one root <svg>, every tag closed
// in order, attribute values quoted, '&' only as a predefined entity, no raw '<' in text.
void check_well_formed(const std::string& xml) {
  std::vector<std::string> stack;
  int roots = 0;
  size_t i = 0;
  auto check_entities = [](const std::string& s) {
    for (size_t k = s.find('&'); k != std::string::npos; k = s.find('&', k + 1)) {
      const std::string rest = s.substr(k, 6);
      INFO(s);
      CHECK((rest.rfind("&amp;", 0) == 0 || rest.rfind("&lt;", 0) == 0 || rest.rfind("&gt;", 0) == 0 ||
             rest.rfind("&quot;", 0) == 0 || rest.rfind("&apos;", 0) == 0));
    }
  };
  while (i < xml.size()) {
    const size_t lt = xml.find('<', i);
    const std::string text = xml.substr(i, lt == std::string::npos ? std::string::npos : lt - i);
    check_entities(text);
    if (stack.empty()) CHECK(text.find_first_not_of(" \n") == std::string::npos);  // nothing outside the root
    if (lt == std::string::npos) break;
    if (xml.compare(lt, 2, "<?") == 0) {
      CHECK(lt == 0);
      i = xml.find("?>", lt) + 2;
      continue;
    }
    // Find the tag's end outside quoted attribute values.
    size_t j = lt + 1;
    bool quoted = false;
    for (; j < xml.size() && (quoted || xml[j] != '>'); ++j) {
      if (xml[j] == '"') quoted = !quoted;
      REQUIRE((quoted || xml[j] != '<'));
    }
    REQUIRE(j < xml.size());
    const std::string tag = xml.substr(lt + 1, j - lt - 1);
    check_entities(tag);
    if (tag[0] == '/') {
      REQUIRE_FALSE(stack.empty());
      CHECK(tag.substr(1) == stack.back());
      stack.pop_back();
    } else {
      const std::string name = tag.substr(0, tag.find_first_of(" \n/"));
      // Attributes: name="value" pairs only.
      static const std::regex attrs(R"(^[a-zA-Z][\w:-]*(\s+[a-zA-Z][\w:-]*="[^"<]*")*\s*/?$)");
      INFO(tag);
      CHECK(std::regex_match(tag, attrs));
      if (stack.empty()) {
        ++roots;
        CHECK(name == "svg");
      }
      if (tag.back() != '/') stack.push_back(name);
    }
    i = j + 1;
  }
  CHECK(stack.empty());
  CHECK(roots == 1);
}

struct Box {
  double x, y, w, h;
};
Box plot_box(const std::string& svg) {
  static const std::regex re(
      R"re(<rect class="plot-box" x="([-\d.]+)" y="([-\d.]+)" width="([-\d.]+)" height="([-\d.]+)")re");
  std::smatch m;
  REQUIRE(std::regex_search(svg, m, re));
  return {std::stod(m[1]), std::stod(m[2]), std::stod(m[3]), std::stod(m[4])};
}

// (pixel position, tick value) of one axis: the tick mark's x1 (x axis) or y1 (y axis) and its label.
std::vector<std::pair<double, double>> ticks(const std::string& svg, const std::string& group, bool x_axis) {
  const size_t start = svg.find("<g class=\"" + group + "\"");
  REQUIRE(start != std::string::npos);
  const std::string body = svg.substr(start, svg.find("</g>", start) - start);
  static const std::regex re(R"re(<line x1="([-\d.]+)" y1="([-\d.]+)" x2="[-\d.]+" y2="[-\d.]+" stroke="[^"]*"/>)re"
                             R"re(<text x="[-\d.]+" y="[-\d.]+">([^<]*)</text>)re");
  std::vector<std::pair<double, double>> out;
  for (auto it = std::sregex_iterator(body.begin(), body.end(), re); it != std::sregex_iterator(); ++it)
    out.emplace_back(std::stod((*it)[x_axis ? 1 : 2]), std::stod((*it)[3]));
  return out;
}

std::vector<std::vector<std::pair<double, double>>> polylines(const std::string& svg) {
  static const std::regex re(R"re(<polyline [^>]*points="([^"]*)")re");
  std::vector<std::vector<std::pair<double, double>>> out;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), re); it != std::sregex_iterator(); ++it) {
    std::vector<std::pair<double, double>> pts;
    std::istringstream in((*it)[1].str());
    std::string p;
    while (in >> p) {
      const size_t comma = p.find(',');
      pts.emplace_back(std::stod(p.substr(0, comma)), std::stod(p.substr(comma + 1)));
    }
    out.push_back(pts);
  }
  return out;
}

size_t count_of(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t k = s.find(what); k != std::string::npos; k = s.find(what, k + 1)) ++n;
  return n;
}

// Coordinates are written with 2 decimals: a parsed pixel is within 0.005 of the exact one.
constexpr double kPixelTol = 0.0051;

// Pixel -> data through the first and last tick of each axis of a line chart.
struct Axes {
  std::vector<std::pair<double, double>> xt, yt;  // (pixel, value) per tick
  explicit Axes(const std::string& svg) : xt(ticks(svg, "x-ticks", true)), yt(ticks(svg, "y-ticks", false)) {
    REQUIRE(xt.size() >= 2);
    REQUIRE(yt.size() >= 2);
  }
  double x(double px) const { return through(xt, px); }
  double y(double py) const { return through(yt, py); }
  // What one pixel of rounding is worth in data units along each axis of `box`.
  double tol_x(double box_w) const { return 2 * kPixelTol * (xt.back().second - xt.front().second) / box_w; }
  double tol_y(double box_h) const { return 2 * kPixelTol * (yt.back().second - yt.front().second) / box_h; }

 private:
  static double through(const std::vector<std::pair<double, double>>& t, double p) {
    return t.front().second +
           (p - t.front().first) / (t.back().first - t.front().first) * (t.back().second - t.front().second);
  }
};

}  // namespace

TEST_CASE("read_run reads summary.json and metrics.jsonl of a finished run", "[cpu]") {
  const RunRecord r = read_run(run_dir("cpu-1"));
  CHECK(r.dir == run_dir("cpu-1"));
  CHECK(r.label == "cpu-1");
  CHECK(r.summary.name == "cpu-1");
  CHECK(r.summary.device == "cpu");
  CHECK(r.summary.world_size == 1);
  CHECK(r.summary.epochs_run == 3);
  CHECK(r.summary.best_test_acc == 0.9282);
  CHECK(r.summary.images_per_second == 1000.0);
  REQUIRE(r.summary.target_accuracy.has_value());
  CHECK(*r.summary.target_accuracy == 0.9);
  REQUIRE(r.epochs.size() == 3);
  CHECK(r.epochs[1].epoch == 2);
  CHECK(r.epochs[1].test_acc == 0.9282);
  CHECK(r.epochs[2].epoch_seconds == 60.5);
}

TEST_CASE("read_run derives the summary of a run without summary.json from its epochs", "[cpu]") {
  const RunRecord r = read_run(run_dir("incomplete") + "/");
  REQUIRE(r.epochs.size() == 2);
  CHECK(r.summary.stop_reason == "incomplete");
  CHECK(r.summary.name == "incomplete");  // the directory's name, trailing slash or not
  CHECK(r.label == "incomplete");
  CHECK(r.summary.epochs_run == 2);
  CHECK(r.summary.best_test_acc == r.epochs[1].test_acc);
  CHECK(r.summary.best_epoch == r.epochs[1].epoch);
  // Over the run: training images / training seconds, each epoch's images = rate * seconds.
  double images = 0, seconds = 0, total = 0;
  for (const EpochMetrics& e : r.epochs) {
    images += e.images_per_second * e.epoch_seconds;
    seconds += e.epoch_seconds;
    total += e.epoch_seconds + e.eval_seconds;
  }
  CHECK(r.summary.images_per_second == Approx(images / seconds).epsilon(4 * std::numeric_limits<double>::epsilon()));
  CHECK(r.summary.total_seconds == Approx(total).epsilon(4 * std::numeric_limits<double>::epsilon()));
}

TEST_CASE("read_run errors name the missing or malformed file", "[cpu]") {
  CHECK_THAT(error_of([] { read_run(run_dir("malformed-metrics")); }),
             Catch::Contains(run_dir("malformed-metrics") + "/metrics.jsonl:2") && Catch::Contains("\"test_acc\""));
  CHECK_THAT(error_of([] { read_run(run_dir("malformed-summary")); }),
             Catch::Contains(run_dir("malformed-summary") + "/summary.json") && Catch::Contains("not valid JSON"));
  CHECK_THAT(error_of([] { read_run(run_dir("no-such-run")); }), Catch::Contains(run_dir("no-such-run")));
  TempDir empty;
  CHECK_THAT(error_of([&] { read_run(empty.path().string()); }),
             Catch::Contains((empty.path() / "metrics.jsonl").string()));
  // A summary without metrics is an error too: the plots need the epochs.
  fs::copy_file(kRuns / "cpu-1" / "summary.json", empty.path() / "summary.json");
  CHECK_THAT(error_of([&] { read_run(empty.path().string()); }),
             Catch::Contains((empty.path() / "metrics.jsonl").string()));
}

TEST_CASE("markdown_table computes speedup and efficiency against the run with the fewest devices", "[cpu]") {
  // The 4-device run first: the baseline is the fewest devices, not the first row.
  const std::vector<RunRecord> runs = read_runs({run_dir("cpu-ddp4"), run_dir("cpu-1"), run_dir("cpu-ddp2")});
  const std::string table = markdown_table(runs);
  INFO(table);
  CHECK_THAT(table, Catch::StartsWith("| run ") && Catch::Contains("| speedup") && Catch::Contains("| efficiency"));
  const auto rows = table_rows(table);
  REQUIRE(rows.size() == 3);
  const RunSummary& base = runs[1].summary;
  REQUIRE(base.world_size == 1);
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunRecord& r = runs[i];
    INFO(r.label);
    REQUIRE(rows[i].size() == 9);
    CHECK(rows[i][kRun] == r.label);
    CHECK(rows[i][kDevice] == r.summary.device);
    CHECK(rows[i][kDevices] == std::to_string(r.summary.world_size));
    CHECK(rows[i][kEpochs] == std::to_string(r.summary.epochs_run));
    CHECK(rows[i][kBestAcc] == fmt("%.4f", r.summary.best_test_acc));
    double mean = 0;
    for (const EpochMetrics& e : r.epochs) mean += e.epoch_seconds / static_cast<double>(r.epochs.size());
    CHECK(rows[i][kEpochTime] == fmt("%.2f", mean));
    CHECK(rows[i][kImages] == fmt("%.0f", r.summary.images_per_second));
    const double speedup = r.summary.images_per_second / base.images_per_second;
    CHECK(rows[i][kSpeedup] == fmt("%.2fx", speedup));
    CHECK(rows[i][kEfficiency] ==
          fmt("%.1f%%", 100 * speedup / (static_cast<double>(r.summary.world_size) / base.world_size)));
  }
  // The fixture numbers in the issue's words: 1870 images/s on 2 devices vs 1000 on one.
  CHECK(rows[2][kSpeedup] == "1.87x");
  CHECK(rows[2][kEfficiency] == "93.5%");
  CHECK(rows[1][kSpeedup] == "1.00x");
  CHECK(rows[1][kEfficiency] == "100.0%");
  CHECK(rows[0][kBestAcc] == "0.9261");
}

TEST_CASE("markdown_table shows no speedup while all runs have one device count", "[cpu]") {
  std::vector<RunRecord> runs = read_runs({run_dir("cpu-1"), run_dir("cpu-1")});
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].label != runs[1].label);  // the same run twice still gets two labels
  runs[1].summary.images_per_second = 2000;
  for (const auto& row : table_rows(markdown_table(runs))) {
    CHECK(row[kSpeedup] == "-");
    CHECK(row[kEfficiency] == "-");
  }
  // Ties for the fewest devices: the first given is the baseline.
  runs.push_back(read_run(run_dir("cpu-ddp2")));
  const auto rows = table_rows(markdown_table(runs));
  CHECK(rows[0][kSpeedup] == "1.00x");
  CHECK(rows[1][kSpeedup] == "2.00x");
  CHECK(rows[2][kSpeedup] == fmt("%.2fx", runs[2].summary.images_per_second / runs[0].summary.images_per_second));
}

TEST_CASE("markdown_table leaves an incomplete run out of the speedup comparison", "[cpu]") {
  // Its device count is unknown (metrics.jsonl does not say), so it can be no baseline.
  const std::vector<RunRecord> runs = read_runs({run_dir("incomplete"), run_dir("cpu-ddp2"), run_dir("cpu-ddp4")});
  const auto rows = table_rows(markdown_table(runs));
  REQUIRE(rows.size() == 3);
  CHECK(rows[0][kDevices] == "?");
  CHECK(rows[0][kEpochs] == "2 (incomplete)");
  CHECK(rows[0][kSpeedup] == "-");
  CHECK(rows[1][kSpeedup] == "1.00x");
  const double sp = runs[2].summary.images_per_second / runs[1].summary.images_per_second;
  CHECK(rows[2][kSpeedup] == fmt("%.2fx", sp));
  CHECK(rows[2][kEfficiency] == fmt("%.1f%%", 100 * sp / 2));
}

TEST_CASE("read_runs tells runs with one name apart by directory", "[cpu]") {
  TempDir tmp;
  for (const char* d : {"a", "b"}) {
    fs::create_directories(tmp.path() / d);
    fs::copy_file(kRuns / "cpu-1" / "summary.json", tmp.path() / d / "summary.json");
    fs::copy_file(kRuns / "cpu-1" / "metrics.jsonl", tmp.path() / d / "metrics.jsonl");
  }
  const auto runs = read_runs({(tmp.path() / "a").string(), (tmp.path() / "b").string(), run_dir("cpu-ddp2")});
  CHECK(runs[0].label == "cpu-1 (a)");
  CHECK(runs[1].label == "cpu-1 (b)");
  CHECK(runs[2].label == "cpu-ddp2");
}

TEST_CASE("markdown_table escapes a '|' in a run label", "[cpu]") {
  std::vector<RunRecord> runs = {read_run(run_dir("cpu-1"))};
  runs[0].label = "a|b";
  const std::string table = markdown_table(runs);
  CHECK_THAT(table, Catch::Contains("a\\|b"));
  CHECK(table_rows(table)[0].size() == 9);
}

TEST_CASE("nice_axis picks 1-2-5 steps whose ticks cover the data", "[cpu]") {
  const std::vector<std::pair<double, double>> ranges = {{0, 1},       {0.3, 0.9},   {0.8431, 0.9282}, {1, 10},
                                                         {-3.7, 12.2}, {1e-7, 3e-7}, {950, 3400},      {5, 5},
                                                         {0, 0},       {-2, -2},     {1e6, 1.00001e6}, {0.1, 0.7}};
  for (const auto& [lo, hi] : ranges) {
    for (int max_ticks : {3, 5, 7, 11}) {
      const svg::Axis a = svg::nice_axis(lo, hi, max_ticks);
      INFO(lo << " .. " << hi << " max_ticks " << max_ticks);
      REQUIRE(a.ticks.size() >= 2);
      CHECK(static_cast<int>(a.ticks.size()) <= max_ticks);
      CHECK(a.ticks.front() == a.lo);
      CHECK(a.ticks.back() == a.hi);
      CHECK(a.lo <= lo);
      CHECK(a.hi >= hi);
      CHECK(a.lo < a.hi);
      // step = m * 10^k with m in {1, 2, 5}
      const double decade = std::pow(10.0, std::floor(std::log10(a.step) + 1e-9));
      const double m = a.step / decade;
      CHECK((std::abs(m - 1) < 1e-9 || std::abs(m - 2) < 1e-9 || std::abs(m - 5) < 1e-9));
      for (size_t i = 1; i < a.ticks.size(); ++i) CHECK(a.ticks[i] - a.ticks[i - 1] == Approx(a.step).epsilon(1e-9));
      // Loose but not wasteful: the axis overshoots the data by less than a step on each side.
      if (lo < hi) {
        CHECK(lo - a.lo < a.step * (1 + 1e-9));
        CHECK(a.hi - hi < a.step * (1 + 1e-9));
      }
    }
  }
  // A bound that is a multiple of the step is not pushed outward by rounding (0.3 / 0.1 < 3).
  const svg::Axis a = svg::nice_axis(0.3, 0.9, 7);
  CHECK(a.step == Approx(0.1));
  CHECK(a.lo == Approx(0.3));
  CHECK(a.hi == Approx(0.9));
  // Epoch axes: no fractional steps.
  CHECK(svg::nice_axis(1, 3, 9, true).step == 1);
  CHECK(svg::nice_axis(1, 3, 9, false).step < 1);
  const svg::Axis nan_axis = svg::nice_axis(std::nan(""), 1, 5);
  CHECK(nan_axis.lo == 0);
  CHECK(nan_axis.hi == 1);
}

TEST_CASE("format_tick uses the decimals of the step and never prints -0", "[cpu]") {
  CHECK(svg::format_tick(0.25, 0.05) == "0.25");
  CHECK(svg::format_tick(1500, 500) == "1500");
  CHECK(svg::format_tick(0.1 * 3 - 0.3, 0.1) == "0.0");
  CHECK(svg::format_tick(-0.0, 1) == "0");
  CHECK(svg::format_tick(-2e-7, 1e-7) == "-0.0000002");
  CHECK(svg::xml_escape("a&b<c>\"d'") == "a&amp;b&lt;c&gt;&quot;d&apos;");
}

TEST_CASE("svg_line_chart draws each non-empty series inside the plot box on ticked axes", "[cpu]") {
  // x from 0 to 10 and y from 0 to 1 are tick values themselves, so the extreme points must land
  // exactly on the plot box's edges.
  const std::vector<Series> series = {
      {"run <a> & \"b\"", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {1, 0.8, 0.55, 0.4, 0.3, 0.22, 0.16, 0.1, 0.05, 0.02, 0}},
      {"empty", {}, {}},
      {"nan only", {1, 2}, {std::nan(""), std::nan("")}},
      {"run c", {2, 5, 9}, {0.5, std::nan(""), 0.75}},
  };
  const std::string s = svg_line_chart("Loss & <more>", "epoch", "loss", series);
  check_well_formed(s);
  CHECK_THAT(s, Catch::Contains("xmlns=\"http://www.w3.org/2000/svg\"") && Catch::Contains("viewBox=\"0 0 "));
  CHECK_THAT(s, Catch::Contains("Loss &amp; &lt;more&gt;") && Catch::Contains("run &lt;a&gt; &amp; &quot;b&quot;"));
  CHECK_THAT(s, Catch::Contains(">epoch</text>") && Catch::Contains(">loss</text>"));
  CHECK(s.find(">empty</text>") == std::string::npos);  // skipped series get no legend entry
  CHECK(s.find(">nan only</text>") == std::string::npos);
  CHECK(count_of(s, "<polyline") == 2);

  const Box box = plot_box(s);
  const Axes axes(s);
  const auto& xt = axes.xt;
  const auto& yt = axes.yt;
  CHECK(xt.front().second <= 0);
  CHECK(xt.back().second >= 10);
  CHECK(yt.front().second <= 0);
  CHECK(yt.back().second >= 1);
  CHECK(xt.front().first == Approx(box.x).margin(kPixelTol));
  CHECK(xt.back().first == Approx(box.x + box.w).margin(kPixelTol));
  CHECK(yt.front().first == Approx(box.y + box.h).margin(kPixelTol));  // y grows downward
  CHECK(yt.back().first == Approx(box.y).margin(kPixelTol));

  // Pixel -> data through the first and last ticks; every drawn point must come back.
  const double tol_x = axes.tol_x(box.w), tol_y = axes.tol_y(box.h);
  const auto lines = polylines(s);
  REQUIRE(lines.size() == 2);
  const std::vector<const Series*> drawn = {&series[0], &series[3]};
  for (size_t k = 0; k < 2; ++k) {
    std::vector<std::pair<double, double>> expected;
    for (size_t i = 0; i < drawn[k]->x.size(); ++i)
      if (std::isfinite(drawn[k]->y[i])) expected.emplace_back(drawn[k]->x[i], drawn[k]->y[i]);
    REQUIRE(lines[k].size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      const auto [px, py] = lines[k][i];
      CHECK(px >= box.x - kPixelTol);
      CHECK(px <= box.x + box.w + kPixelTol);
      CHECK(py >= box.y - kPixelTol);
      CHECK(py <= box.y + box.h + kPixelTol);
      CHECK(axes.x(px) == Approx(expected[i].first).margin(tol_x));
      CHECK(axes.y(py) == Approx(expected[i].second).margin(tol_y));
    }
  }
  // The extremes of the first series sit on the box's edges.
  CHECK(lines[0].front().first == Approx(box.x).margin(kPixelTol));
  CHECK(lines[0].back().first == Approx(box.x + box.w).margin(kPixelTol));
  CHECK(lines[0].front().second == Approx(box.y).margin(kPixelTol));
  CHECK(lines[0].back().second == Approx(box.y + box.h).margin(kPixelTol));
  // One palette color per drawn series.
  static const std::regex stroke(R"re(<polyline stroke="(#[0-9a-f]{6})")re");
  std::vector<std::string> colors;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), stroke); it != std::sregex_iterator(); ++it)
    colors.push_back((*it)[1]);
  REQUIRE(colors.size() == 2);
  CHECK(colors[0] == svg::kPalette[0]);
  CHECK(colors[1] == svg::kPalette[1]);
}

TEST_CASE("svg_line_chart gives every one of many series its own color or dash", "[cpu]") {
  std::vector<Series> series;
  for (int i = 0; i < 14; ++i) series.push_back({"s" + std::to_string(i), {1, 2}, {double(i), double(i + 1)}});
  const std::string s = svg_line_chart("t", "epoch", "y", series);
  check_well_formed(s);
  CHECK(count_of(s, "<polyline") == 14);
  static const std::regex style(R"re(<polyline (stroke="[^"]*"(?: stroke-dasharray="[^"]*")?))re");
  std::vector<std::string> styles;
  for (auto it = std::sregex_iterator(s.begin(), s.end(), style); it != std::sregex_iterator(); ++it)
    styles.push_back((*it)[1]);
  REQUIRE(styles.size() == 14);
  for (size_t i = 0; i < styles.size(); ++i)
    for (size_t j = i + 1; j < styles.size(); ++j) CHECK(styles[i] != styles[j]);
  // Nothing drawn: still a valid chart saying so.
  const std::string none = svg_line_chart("t", "epoch", "y", {{"e", {}, {}}});
  check_well_formed(none);
  CHECK(count_of(none, "<polyline") == 0);
  CHECK_THAT(none, Catch::Contains("no data"));
  CHECK_THAT(error_of([] { svg_line_chart("t", "x", "y", {{"bad", {1, 2}, {1}}}); }), Catch::Contains("bad"));
}

TEST_CASE("svg_bar_chart draws bars from zero with heights proportional to the values", "[cpu]") {
  const std::vector<std::string> labels = {"cpu-1", "cpu-ddp2", "x<&>", "broken"};
  const std::vector<double> values = {1000, 1870, 3400, std::nan("")};
  const std::string s = svg_bar_chart("Throughput", "images/s", labels, values);
  check_well_formed(s);
  CHECK_THAT(s, Catch::Contains("x&lt;&amp;&gt;") && Catch::Contains(">images/s</text>") &&
                    Catch::Contains(">n/a</text>") && Catch::Contains(">1870</text>"));
  static const std::regex bar(
      R"re(<rect class="bar" x="([-\d.]+)" y="([-\d.]+)" width="([-\d.]+)" height="([-\d.]+)")re");
  std::vector<std::pair<double, double>> bars;  // (top, height)
  for (auto it = std::sregex_iterator(s.begin(), s.end(), bar); it != std::sregex_iterator(); ++it)
    bars.emplace_back(std::stod((*it)[2]), std::stod((*it)[4]));
  REQUIRE(bars.size() == 3);
  const Box box = plot_box(s);
  const auto yt = ticks(s, "y-ticks", false);
  REQUIRE(yt.size() >= 2);
  CHECK(yt.front().second == 0);
  CHECK(yt.back().second >= 3400);
  const double px_per_unit = (yt.front().first - yt.back().first) / (yt.back().second - yt.front().second);
  for (size_t i = 0; i < bars.size(); ++i) {
    INFO(labels[i]);
    CHECK(bars[i].first + bars[i].second == Approx(box.y + box.h).margin(2 * kPixelTol));  // bottom on 0
    CHECK(bars[i].second == Approx(values[i] * px_per_unit).margin(2 * kPixelTol));
  }
  CHECK_THAT(error_of([] { svg_bar_chart("t", "y", {"a"}, {1, 2}); }), Catch::Contains("1 labels but 2 values"));
}

TEST_CASE("write_report writes the table, the plots and links them", "[cpu]") {
  TempDir tmp;
  const fs::path out = tmp.path() / "nested" / "report";
  const std::vector<RunRecord> runs = read_runs({run_dir("cpu-1"), run_dir("cpu-ddp2"), run_dir("incomplete")});
  const std::string table = write_report(runs, out.string());
  CHECK(table == markdown_table(runs));
  const std::string md = read_text(out / "report.md");
  CHECK_THAT(md, Catch::Contains(table) && Catch::Contains("](loss.svg)") && Catch::Contains("](accuracy.svg)") &&
                     Catch::Contains("](throughput.svg)"));
  CHECK_THAT(md, Catch::Contains("incomplete") && Catch::Contains(run_dir("cpu-ddp2")));
  const std::string loss = read_text(out / "loss.svg"), acc = read_text(out / "accuracy.svg"),
                    thr = read_text(out / "throughput.svg");
  check_well_formed(loss);
  check_well_formed(acc);
  check_well_formed(thr);
  CHECK(count_of(loss, "<polyline") == 6);  // train and test per run
  CHECK(count_of(acc, "<polyline") == 3);
  CHECK(count_of(thr, "<rect class=\"bar\"") == 3);
  CHECK_THAT(loss, Catch::Contains(">cpu-ddp2 test</text>"));
  for (const char* f : {"report.md.tmp", "loss.svg.tmp"}) CHECK_FALSE(fs::exists(out / f));
  // An output path that is a file is an error naming it.
  const fs::path file = tmp.path() / "file";
  std::ofstream(file) << "x";
  CHECK_THAT(error_of([&] { write_report(runs, file.string()); }), Catch::Contains(file.string()));
}

TEST_CASE("write_report plots the fp16 loss scale and counts skipped steps", "[cpu]") {
  TempDir tmp;
  RunRecord fp16{"runs/a", "fp16", {}, {}, {}}, fp32{"runs/b", "fp32", {}, {}, {}};
  fp16.summary.name = "fp16";
  fp32.summary.name = "fp32";
  for (int e = 1; e <= 3; ++e) {
    EpochMetrics m;
    m.epoch = e;
    fp32.epochs.push_back(m);
    m.loss_scale = e == 1 ? 16384 : 32768;  // log2: 14, 15, 15
    m.skipped_steps = e == 1 ? 2 : (e == 3 ? 1 : 0);
    fp16.epochs.push_back(m);
  }
  write_report({fp16, fp32}, tmp.str());
  const std::string md = read_text(tmp.path() / "report.md");
  CHECK_THAT(md, Catch::Contains("](loss_scale.svg)") &&
                     Catch::Contains("fp16 loss scale 32768 after the last epoch, 3 steps skipped"));
  const std::string svg = read_text(tmp.path() / "loss_scale.svg");
  check_well_formed(svg);
  CHECK(count_of(svg, "<polyline") == 1);  // the fp32 run has no loss scale
  CHECK_THAT(svg, Catch::Contains(">log2(loss scale)</text>") && Catch::Contains(">fp16</text>"));
  // report_files() lists what was written, the loss-scale plot included (ember-report's "wrote" line).
  CHECK(report_files({fp16, fp32}) == std::vector<std::string>{"report.md", "loss.svg", "accuracy.svg",
                                                               "throughput.svg", "loss_scale.svg",
                                                               "accuracy_time.svg"});
  for (const std::string& f : report_files({fp16, fp32})) CHECK(fs::exists(tmp.path() / f));
  // Without fp16 runs there is no loss-scale plot.
  TempDir none;
  write_report({fp32}, none.str());
  CHECK_FALSE(fs::exists(none.path() / "loss_scale.svg"));
  CHECK_THAT(read_text(none.path() / "report.md"), !Catch::Contains("loss_scale.svg"));
  CHECK(report_files({fp32}) ==
        std::vector<std::string>{"report.md", "loss.svg", "accuracy.svg", "throughput.svg", "accuracy_time.svg"});
  // One skipped step is one "step".
  fp16.epochs[0].skipped_steps = 0;
  fp16.epochs[2].skipped_steps = 1;
  TempDir one;
  write_report({fp16}, one.str());
  CHECK_THAT(read_text(one.path() / "report.md"), Catch::Contains("after the last epoch, 1 step skipped"));
}

// ---- ember-report --scaling ----

namespace {

// One metrics.jsonl line: `images` training images in `seconds`, gradient all-reduce `comm` of
// which `exposed` waited for, and phase times {data wait, forward, backward, optimizer}.
EpochMetrics scaling_epoch(int64_t n, double seconds, double images, double comm, double exposed, double acc,
                           std::array<double, 4> phases) {
  EpochMetrics e;
  e.epoch = n;
  e.train_loss = e.test_loss = 1.0 / static_cast<double>(n);
  e.test_acc = acc;
  e.epoch_seconds = seconds;
  e.images_per_second = images / seconds;
  e.eval_seconds = 1;
  e.data_wait_seconds = phases[0];
  e.forward_seconds = phases[1];
  e.backward_seconds = phases[2];
  e.optimizer_seconds = phases[3];
  e.comm_seconds = comm;
  e.comm_exposed_seconds = exposed;
  return e;
}

// A run directory as ember-train writes one.
std::string write_run(const fs::path& dir, const std::string& name, int64_t world, double best,
                      const std::vector<EpochMetrics>& epochs, const std::string& stop_reason = "completed") {
  fs::create_directories(dir);
  RunSummary s;
  s.stop_reason = stop_reason;
  s.name = name;
  s.device = "cpu";
  s.world_size = world;
  s.epochs_run = static_cast<int64_t>(epochs.size());
  s.best_test_acc = best;
  s.images_per_second = 12345;  // deliberately not the epochs' figure: the table must use the epochs
  std::ofstream(dir / "summary.json") << to_json(s);
  std::ofstream metrics(dir / "metrics.jsonl");
  for (const EpochMetrics& e : epochs) metrics << to_json_line(e) << "\n";
  return dir.string();
}

// Three runs of 50000 images per epoch, 4 epochs each; the first epoch is slow (warm-up) and has
// figures that would change every mean if it were counted.
//   world 1: 50 s per epoch -> 1000 images/s; no communication; data wait 1 of 50 s.
//   world 2: 27.5 s -> 1818.18 images/s, speedup 1.818, efficiency 90.9%; comm 5 s, exposed 2 s
//            (7.27% of the epoch, 60% hidden); data wait 10 of 27.5 s: input-bound (36%).
//   world 4: 19, 20, 21 s -> 150000 images / 60 s = 2500 images/s (the mean of the epochs' rates
//            would be 2504), speedup 2.5, efficiency 62.5%; comm 9, 10, 11 s, exposed 5, 6, 7 s
//            (30% of the epoch, 40% hidden): communication-bound.
// Given in the order 4, 1, 2.
std::vector<std::string> write_scaling_runs(const fs::path& root) {
  const double kImages = 50000;
  std::vector<std::string> dirs;
  dirs.push_back(write_run(root / "w4", "mnist-4", 4, 0.921,
                           {scaling_epoch(1, 40, kImages, 20, 20, 0.85, {30, 4, 4, 2}),
                            scaling_epoch(2, 19, kImages, 9, 5, 0.90, {1, 4, 12, 3}),
                            scaling_epoch(3, 20, kImages, 10, 6, 0.921, {1, 4, 12, 3}),
                            scaling_epoch(4, 21, kImages, 11, 7, 0.919, {1, 4, 12, 3})}));
  dirs.push_back(write_run(root / "w1", "mnist-1", 1, 0.92,
                           {scaling_epoch(1, 100, kImages, 0, 0, 0.85, {50, 15, 30, 5}),
                            scaling_epoch(2, 50, kImages, 0, 0, 0.90, {1, 15, 30, 4}),
                            scaling_epoch(3, 50, kImages, 0, 0, 0.92, {1, 15, 30, 4}),
                            scaling_epoch(4, 50, kImages, 0, 0, 0.915, {1, 15, 30, 4})}));
  dirs.push_back(write_run(root / "w2", "mnist-2", 2, 0.925,
                           {scaling_epoch(1, 60, kImages, 8, 8, 0.86, {5, 20, 30, 5}),
                            scaling_epoch(2, 27.5, kImages, 5, 2, 0.90, {10, 5, 10, 2.5}),
                            scaling_epoch(3, 27.5, kImages, 5, 2, 0.925, {10, 5, 10, 2.5}),
                            scaling_epoch(4, 27.5, kImages, 5, 2, 0.91, {10, 5, 10, 2.5})}));
  return dirs;
}

enum ScalingCol {
  kSRun,
  kSWorld,
  kSDevice,
  kSEpochs,
  kSEpochTime,
  kSImages,
  kSSpeedup,
  kSEfficiency,
  kSComm,
  kSExposed,
  kSShare,
  kSHidden,
  kSFinal,
  kSBest
};

// The data points of the k-th polyline of a chart, read back through its axes.
std::vector<std::pair<double, double>> chart_points(const std::string& svg, size_t k) {
  const Axes axes(svg);
  const auto lines = polylines(svg);
  REQUIRE(k < lines.size());
  std::vector<std::pair<double, double>> out;
  for (const auto& [px, py] : lines[k]) out.emplace_back(axes.x(px), axes.y(py));
  return out;
}

void check_points(const std::string& svg, size_t k, const std::vector<std::pair<double, double>>& expected) {
  const Box box = plot_box(svg);
  const Axes axes(svg);
  const auto got = chart_points(svg, k);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("point " << i);
    CHECK(got[i].first == Approx(expected[i].first).margin(axes.tol_x(box.w)));
    CHECK(got[i].second == Approx(expected[i].second).margin(axes.tol_y(box.h)));
  }
}

}  // namespace

TEST_CASE("scaling table: runs by world size, means after warm-up, speedup, efficiency, exposed and hidden comm",
          "[cpu]") {
  TempDir tmp;
  const std::vector<RunRecord> runs = read_runs(write_scaling_runs(tmp.path()));
  const std::vector<ScalingRow> rows = scaling_rows(runs);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].world_size == 1);
  CHECK(rows[1].world_size == 2);
  CHECK(rows[2].world_size == 4);
  CHECK(rows[2].images_per_second == Approx(2500).epsilon(1e-12));
  CHECK(rows[1].speedup == Approx(50000 / 27.5 / 1000).epsilon(1e-12));
  CHECK(rows[2].efficiency == Approx(0.625).epsilon(1e-12));
  CHECK(rows[2].exposed_share == Approx(0.3).epsilon(1e-12));
  CHECK(rows[2].hidden_fraction == Approx(0.4).epsilon(1e-12));
  CHECK(std::isnan(rows[0].hidden_fraction));

  const std::string table = scaling_table(rows);
  INFO(table);
  const auto cells = table_rows(table);
  REQUIRE(cells.size() == 3);
  const std::vector<std::vector<std::string>> expected = {
      {"mnist-1", "1", "cpu", "2-4", "50.00", "1000", "1.00x", "100.0%", "0.00", "0.00", "0.0%", "-", "0.9150",
       "0.9200"},
      {"mnist-2", "2", "cpu", "2-4", "27.50", "1818", "1.82x", "90.9%", "5.00", "2.00", "7.3%", "60.0%", "0.9100",
       "0.9250"},
      {"mnist-4", "4", "cpu", "2-4", "20.00", "2500", "2.50x", "62.5%", "10.00", "6.00", "30.0%", "40.0%", "0.9190",
       "0.9210"},
  };
  for (size_t i = 0; i < 3; ++i) CHECK(cells[i] == expected[i]);
  CHECK_THAT(table,
             Catch::StartsWith("| run ") && Catch::Contains("| exposed share |") && Catch::Contains("| hidden |"));

  CHECK_THAT(rows[2].verdict, Catch::StartsWith("communication-bound: 30% of the epoch waits for the gradient "
                                                "all-reduce"));
  CHECK(rows[1].verdict == "input-bound: data wait is 36% of the step; raise data.workers or set data.resident");
  CHECK(rows[0].verdict == "not communication- or input-bound (data wait 2.0% of the step)");
  const std::string text = scaling_text(rows);
  CHECK_THAT(text, Catch::StartsWith(table) && Catch::Contains("left out as warm-up") &&
                       Catch::Contains("that of 'mnist-1' (world 1)") &&
                       Catch::Contains("- mnist-4 (world 4): communication-bound: 30%"));
  CHECK(text.find("Warning") == std::string::npos);  // every run saw 50000 images per epoch
  CHECK(text.find("WARNING") == std::string::npos);  // and trained 4 epochs, all "completed"
}

TEST_CASE("scaling table: runs of one or two epochs are averaged whole and ties keep the given order", "[cpu]") {
  TempDir tmp;
  const auto e = [](int64_t n, double seconds, double images) {
    return scaling_epoch(n, seconds, images, 0, 0, 0.5, {1, 1, 1, 1});
  };
  const std::string a = write_run(tmp.path() / "a", "a", 2, 0.5, {e(1, 30, 30000), e(2, 10, 30000)});
  const std::string b = write_run(tmp.path() / "b", "b", 1, 0.5, {e(1, 60, 30000)});
  const std::string c = write_run(tmp.path() / "c", "c", 2, 0.5, {e(1, 20, 30000), e(2, 20, 30000)});
  const auto rows = scaling_rows(read_runs({a, b, c}));
  const auto cells = table_rows(scaling_table(rows));
  REQUIRE(cells.size() == 3);
  CHECK(cells[0][kSRun] == "b");
  CHECK(cells[0][kSEpochs] == "1");
  CHECK(cells[1][kSRun] == "a");  // a before c: both world 2, given in that order
  CHECK(cells[2][kSRun] == "c");
  CHECK(cells[1][kSEpochs] == "1-2");
  CHECK(cells[1][kSEpochTime] == "20.00");  // (30 + 10) / 2: both epochs count
  CHECK(cells[1][kSImages] == "1500");  // 60000 images / 40 s
  CHECK(cells[1][kSSpeedup] == "3.00x");  // against 500 images/s
  CHECK(cells[1][kSEfficiency] == "150.0%");
  CHECK(cells[2][kSSpeedup] == "3.00x");
  CHECK(cells[1][kSHidden] == "-");
}

TEST_CASE("scaling against a smallest world of 2: efficiency and the ideal line use the world-size ratio", "[cpu]") {
  TempDir tmp;
  const auto e = [](double seconds) { return scaling_epoch(1, seconds, 40000, 0, 0, 0.5, {1, 1, 1, 1}); };
  const std::string two = write_run(tmp.path() / "two", "two", 2, 0.5, {e(20)});  // 2000 images/s
  const std::string eight = write_run(tmp.path() / "eight", "eight", 8, 0.5, {e(8)});  // 5000 images/s
  const std::vector<RunRecord> runs = read_runs({eight, two});
  const auto cells = table_rows(scaling_table(scaling_rows(runs)));
  REQUIRE(cells.size() == 2);
  CHECK(cells[0][kSRun] == "two");
  CHECK(cells[1][kSSpeedup] == "2.50x");
  CHECK(cells[1][kSEfficiency] == "62.5%");  // 2.5 / (8 / 2)
  const fs::path out = tmp.path() / "out";
  write_scaling_report(runs, out.string());
  const std::string speedup = read_text(out / "scaling.svg");
  CHECK_THAT(speedup, Catch::Contains("Speedup vs world size (baseline: world 2)"));
  check_points(speedup, 0, {{2, 1}, {8, 2.5}});
  check_points(speedup, 1, {{2, 1}, {8, 4}});
  check_points(read_text(out / "scaling-efficiency.svg"), 0, {{2, 100}, {8, 62.5}});
}

TEST_CASE("scaling report warns when runs saw different numbers of images per epoch", "[cpu]") {
  // World 2 counted one process's images: 25000 per epoch instead of 50000.
  TempDir tmp;
  const auto e = [](int64_t n, double images) { return scaling_epoch(n, 10, images, 0, 0, 0.5, {1, 1, 1, 1}); };
  const std::string one = write_run(tmp.path() / "one", "one", 1, 0.5, {e(1, 50000)});
  const std::string two = write_run(tmp.path() / "two", "two", 2, 0.5, {e(1, 25000)});
  const std::string text = scaling_text(scaling_rows(read_runs({one, two})));
  CHECK_THAT(text, Catch::Contains("Warning: the runs trained on different numbers of images per epoch (one 50000; "
                                   "two 25000)"));
}

TEST_CASE("scaling report warns first when runs trained different epochs or stopped for different reasons", "[cpu]") {
  // docs/scaling.md's recipe once left patience on: the 2-process run stopped after 3 epochs.
  TempDir tmp;
  const auto e = [](int64_t n) { return scaling_epoch(n, 10, 50000, 0, 0, 0.5, {1, 1, 1, 1}); };
  const std::string one = write_run(tmp.path() / "one", "one", 1, 0.5, {e(1), e(2), e(3), e(4), e(5)});
  const std::string two = write_run(tmp.path() / "two", "two", 2, 0.5, {e(1), e(2), e(3)}, "patience");
  const auto rows = scaling_rows(read_runs({one, two}));
  const std::string text = scaling_text(rows);
  CHECK_THAT(text, Catch::StartsWith(scaling_table(rows) + "\nWARNING: the runs trained different numbers of epochs "
                                                           "or stopped for different reasons (one: 5 epochs, "
                                                           "completed; two: 3 epochs, patience)") &&
                       Catch::Contains("early_stop.target_accuracy=null early_stop.patience=0"));
  // The same epochs but a different reason (a target reached on the last epoch) still warns.
  const std::string target =
      write_run(tmp.path() / "target", "target", 2, 0.5, {e(1), e(2), e(3), e(4), e(5)}, "target");
  CHECK_THAT(scaling_text(scaling_rows(read_runs({one, target}))),
             Catch::Contains("(one: 5 epochs, completed; target: 5 epochs, target)"));
  // The same epochs and reason: no warning.
  const std::string same = write_run(tmp.path() / "same", "same", 2, 0.5, {e(1), e(2), e(3), e(4), e(5)});
  CHECK_THAT(scaling_text(scaling_rows(read_runs({one, same}))), !Catch::Contains("WARNING"));
}

TEST_CASE("scaling report refuses runs of one world size and runs without a summary", "[cpu]") {
  TempDir tmp;
  const auto e = scaling_epoch(1, 10, 1000, 0, 0, 0.5, {1, 1, 1, 1});
  const std::string a = write_run(tmp.path() / "a", "a", 2, 0.5, {e});
  const std::string b = write_run(tmp.path() / "b", "b", 2, 0.5, {e});
  const fs::path out = tmp.path() / "out";
  CHECK_THAT(error_of([&] {
               write_scaling_report(read_runs({a, b}), out.string());
             }),
             Catch::Contains("different world sizes, but all 2 runs trained on world size 2"));
  CHECK_FALSE(fs::exists(out));  // nothing written
  CHECK_THAT(error_of([&] { scaling_rows(read_runs({a})); }), Catch::Contains("two or more runs, got 1"));
  const std::string incomplete = (tmp.path() / "c").string();
  fs::create_directories(incomplete);
  std::ofstream(tmp.path() / "c" / "metrics.jsonl") << to_json_line(e) << "\n";
  CHECK_THAT(error_of([&] {
               scaling_rows(read_runs({a, incomplete}));
             }),
             Catch::Contains("run '" + incomplete + "' has no summary.json"));
}

TEST_CASE("write_scaling_report writes the table and plots speedup and efficiency over world size", "[cpu]") {
  TempDir tmp;
  const std::vector<RunRecord> runs = read_runs(write_scaling_runs(tmp.path() / "runs"));
  const fs::path out = tmp.path() / "report";
  const std::string text = write_scaling_report(runs, out.string());
  CHECK(text == scaling_text(scaling_rows(runs)));
  const std::string md = read_text(out / "scaling.md");
  CHECK_THAT(
      md, Catch::Contains(text) && Catch::Contains("](scaling.svg)") && Catch::Contains("](scaling-efficiency.svg)"));

  const std::string speedup = read_text(out / "scaling.svg");
  check_well_formed(speedup);
  CHECK(count_of(speedup, "<polyline") == 2);
  CHECK_THAT(speedup, Catch::Contains(">speedup (measured)</text>") && Catch::Contains(">ideal (linear)</text>") &&
                          Catch::Contains(">world size (processes or devices)</text>"));
  check_points(speedup, 0, {{1, 1}, {2, 50000 / 27.5 / 1000}, {4, 2.5}});
  check_points(speedup, 1, {{1, 1}, {2, 2}, {4, 4}});

  const std::string efficiency = read_text(out / "scaling-efficiency.svg");
  check_well_formed(efficiency);
  CHECK(count_of(efficiency, "<polyline") == 2);
  CHECK_THAT(efficiency,
             Catch::Contains(">parallel efficiency (measured)</text>") && Catch::Contains(">ideal (100%)</text>"));
  check_points(efficiency, 0, {{1, 100}, {2, 100 * 50000 / 27.5 / 2000}, {4, 62.5}});
  check_points(efficiency, 1, {{1, 100}, {2, 100}, {4, 100}});
}
