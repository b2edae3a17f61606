// ember-report --profile (see profile.h): the table, the verdict and the timeline SVG of a trace.
#include "report/profile.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include <ember/core/error.h>
#include <ember/train/metrics.h>
#include "report/report.h"
#include "report/svg.h"

namespace ember::report {

namespace {

namespace fs = std::filesystem;
using profiler::Category;
using profiler::RankProfile;
using profiler::Span;

// Layout in SVG user units: a label column, the plot, one lane per nesting depth of a thread.
constexpr double kLabelWidth = 200, kPlotWidth = 900, kTop = 70, kLane = 16, kThreadGap = 6, kRankGap = 14;
constexpr uint32_t kMaxLanes = 10;  // deeper spans are not drawn (the title says how many)
constexpr double kCharWidth = 6;  // a 10px sans-serif character, roughly

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

const char* colour(Category c) {
  switch (c) {
    case Category::op:
      return "#4e79a7";
    case Category::backward:
      return "#f28e2b";
    case Category::data:
      return "#59a14f";
    case Category::optimizer:
      return "#b07aa1";
    case Category::comm:
      return "#e15759";
    case Category::step:
      return "#bab0ac";
    case Category::user:
      break;
  }
  return "#76b7b2";
}

std::string ms_text(uint64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", static_cast<double>(ns) / 1e6);
  return buf;
}

}  // namespace

std::string profile_trace_path(const std::string& path) {
  std::error_code ec;
  EMBER_CHECK(fs::exists(path, ec), "'", path, "': no such run directory or trace file");
  if (!fs::is_directory(path, ec)) return path;
  const std::string trace = (fs::path(path) / "profile" / "trace.json").string();
  EMBER_CHECK(fs::exists(trace, ec), "'", trace, "' does not exist: was the run profiled (ember-train's ",
              "profile.enabled=true, an example's --profile DIR)?");
  return trace;
}

std::string svg_profile_timeline(const std::vector<RankProfile>& ranks) {
  // The window: the last kept step on every rank that has it, else everything.
  int64_t last_step = -1;
  for (const RankProfile& r : ranks)
    for (const Span& s : r.spans)
      if (s.event.category == Category::step) last_step = std::max(last_step, s.step);
  uint64_t t0 = UINT64_MAX, t1 = 0;
  for (const RankProfile& r : ranks)
    for (const Span& s : r.spans)
      if (last_step < 0 || (s.event.category == Category::step && s.step == last_step)) {
        t0 = std::min(t0, s.event.start_ns);
        t1 = std::max(t1, s.event.end_ns);
      }
  if (t0 >= t1) t0 = 0, t1 = 1;
  const svg::Axis axis = svg::nice_axis(0, static_cast<double>(t1 - t0) / 1e6, 10);
  const double scale = kPlotWidth / (axis.hi * 1e6);  // units per ns
  const auto px = [&](uint64_t t) {
    const uint64_t c = std::clamp(t, t0, t1);
    return kLabelWidth + static_cast<double>(c - t0) * scale;
  };

  // Rows: per rank, the threads with a span in the window, each as deep as its spans nest there.
  struct Row {
    int rank;
    std::string thread;
    std::vector<const Span*> spans;
    uint32_t lanes = 1;
    double y = 0;
    bool steps = false;  // the thread that ran the steps: its rank's first row
  };
  std::vector<Row> rows;
  size_t hidden = 0;
  double y = kTop;
  for (const RankProfile& r : ranks) {
    std::map<uint32_t, Row> by_thread;
    for (const Span& s : r.spans) {
      if (s.event.start_ns >= t1 || s.event.end_ns <= t0) continue;
      Row& row = by_thread[s.event.thread];
      row.rank = r.rank;
      row.thread = s.event.thread < r.thread_names.size() ? r.thread_names[s.event.thread]
                                                          : "thread " + std::to_string(s.event.thread);
      if (s.event.depth >= kMaxLanes) {
        ++hidden;
        continue;
      }
      row.spans.push_back(&s);
      row.lanes = std::max(row.lanes, s.event.depth + 1);
      row.steps = row.steps || s.event.category == Category::step;
    }
    if (by_thread.empty()) continue;
    y += kRankGap;
    std::vector<Row> mine;
    for (auto& [t, row] : by_thread) mine.push_back(std::move(row));
    std::stable_partition(mine.begin(), mine.end(), [](const Row& row) { return row.steps; });
    for (Row& row : mine) {
      row.y = y;
      y += kLane * row.lanes + kThreadGap;
      rows.push_back(std::move(row));
    }
  }
  const double plot_bottom = y;
  const double width = kLabelWidth + kPlotWidth + 30, height = plot_bottom + 70;

  std::ostringstream os;
  const std::string title = last_step >= 0
                                ? "Timeline of step " + std::to_string(last_step) + " (" + ms_text(t1 - t0) + ")"
                                : "Timeline of the profile (" + ms_text(t1 - t0) + ")";
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width) << "\" height=\"" << num(height)
     << "\" viewBox=\"0 0 " << num(width) << " " << num(height) << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
     << "<title>" << svg::xml_escape(title) << "</title>\n"
     << "<rect class=\"background\" x=\"0\" y=\"0\" width=\"" << num(width) << "\" height=\"" << num(height)
     << "\" fill=\"white\"/>\n"
     << "<text class=\"title\" x=\"" << num(kLabelWidth + kPlotWidth / 2) << "\" y=\"24\" text-anchor=\"middle\" "
     << "font-size=\"16\">" << svg::xml_escape(title) << "</text>\n";
  // The time axis on top, its grid lines through every row.
  os << "<g class=\"time-axis\" text-anchor=\"middle\">\n";
  for (double t : axis.ticks) {
    const double x = kLabelWidth + t * 1e6 * scale;
    os << "<line x1=\"" << num(x) << "\" y1=\"" << num(kTop - 4) << "\" x2=\"" << num(x) << "\" y2=\""
       << num(plot_bottom) << "\" stroke=\"#e6e6e6\"/><text x=\"" << num(x) << "\" y=\"" << num(kTop - 8) << "\">"
       << svg::format_tick(t, axis.step) << "</text>\n";
  }
  os << "<text class=\"x-label\" x=\"" << num(kLabelWidth + kPlotWidth / 2) << "\" y=\"" << num(kTop - 26)
     << "\">ms from the step's start</text>\n</g>\n";
  os << "<g class=\"rows\">\n";
  int shown_rank = -1;
  for (const Row& row : rows) {
    const double h = kLane * row.lanes;
    os << "<g class=\"thread-row\">\n";
    if (row.rank != shown_rank || &row == &rows.front()) {
      os << "<text class=\"rank\" x=\"8\" y=\"" << num(row.y - 2) << "\" font-weight=\"bold\">rank " << row.rank
         << "</text>\n";
      shown_rank = row.rank;
    }
    os << "<rect x=\"" << num(kLabelWidth) << "\" y=\"" << num(row.y) << "\" width=\"" << num(kPlotWidth)
       << "\" height=\"" << num(h) << "\" fill=\"#f7f7f7\"/>\n"
       << "<text class=\"thread\" x=\"18\" y=\"" << num(row.y + 12) << "\">" << svg::xml_escape(row.thread)
       << "</text>\n";
    os << "<g class=\"spans\" font-size=\"10\">\n";
    for (const Span* s : row.spans) {
      const double x0 = px(s->event.start_ns), x1 = px(s->event.end_ns);
      const double w = std::max(0.5, x1 - x0), sy = row.y + kLane * s->event.depth + 1;
      std::string tip = s->event.name + " (" + profiler::category_name(s->event.category) +
                        "): " + ms_text(s->event.end_ns - s->event.start_ns);
      if (!s->event.input_shapes.empty()) tip += "; inputs " + s->event.input_shapes;
      os << "<rect class=\"span\" x=\"" << num(x0) << "\" y=\"" << num(sy) << "\" width=\"" << num(w) << "\" height=\""
         << num(kLane - 2) << "\" fill=\"" << colour(s->event.category) << "\"><title>" << svg::xml_escape(tip)
         << "</title></rect>\n";
      const size_t fits = static_cast<size_t>((w - 4) / kCharWidth);
      if (fits >= 5) {  // a label of a few characters, or none
        std::string label = s->event.name;
        if (label.size() > fits) label = label.substr(0, fits - 1) + "~";
        os << "<text x=\"" << num(x0 + 2) << "\" y=\"" << num(sy + 10) << "\" fill=\"white\">" << svg::xml_escape(label)
           << "</text>\n";
      }
    }
    os << "</g>\n</g>\n";
  }
  os << "</g>\n";
  // The legend: one swatch per category.
  os << "<g class=\"legend\">\n";
  double lx = kLabelWidth;
  for (Category c : {Category::op, Category::backward, Category::optimizer, Category::data, Category::comm,
                     Category::user, Category::step}) {
    const std::string name = profiler::category_name(c);
    os << "<rect x=\"" << num(lx) << "\" y=\"" << num(plot_bottom + 20) << "\" width=\"12\" height=\"12\" fill=\""
       << colour(c) << "\"/><text x=\"" << num(lx + 16) << "\" y=\"" << num(plot_bottom + 30) << "\">" << name
       << "</text>\n";
    lx += 30 + 7 * static_cast<double>(name.size());
  }
  os << "</g>\n";
  if (hidden > 0)
    os << "<text class=\"hidden\" x=\"" << num(kLabelWidth) << "\" y=\"" << num(plot_bottom + 55)
       << "\" fill=\"#888888\">" << hidden << " spans nested deeper than " << kMaxLanes
       << " levels are not drawn</text>\n";
  if (rows.empty())
    os << "<text class=\"no-data\" x=\"" << num(kLabelWidth + kPlotWidth / 2) << "\" y=\"" << num(kTop + 30)
       << "\" text-anchor=\"middle\" fill=\"#888888\">no spans</text>\n";
  os << "</svg>\n";
  return os.str();
}

std::string profile_text(const std::vector<RankProfile>& ranks, const std::string& trace_path) {
  size_t spans = 0;
  for (const RankProfile& r : ranks) spans += r.spans.size();
  std::string out = "# Profile: " + trace_path + "\n\n" + std::to_string(ranks.size()) +
                    (ranks.size() == 1 ? " rank, " : " ranks, ") + std::to_string(spans) + " spans.\n\n";
  return out + profiler::ops_markdown(ranks, 30);
}

std::string write_profile_report(const std::string& path, const std::string& out_dir) {
  const std::string trace = profile_trace_path(path);
  const std::vector<RankProfile> ranks = profiler::load_chrome_trace(trace);
  const std::string text = profile_text(ranks, trace);
  make_report_dir(out_dir);
  const fs::path out(out_dir);
  train::write_file_atomic((out / "profile_timeline.svg").string(), svg_profile_timeline(ranks));
  train::write_file_atomic((out / "profile.md").string(),
                           text + "\n## Timeline of the last kept step\n\n![timeline](profile_timeline.svg)\n");
  return text;
}

}  // namespace ember::report
