// The SVG charts of ember-report (tools/report/report.h): hand-written SVG 1.1, no dependencies. A
// chart is a plot box with 1-2-5 ticks on both axes (tools/report/svg.h), axis labels, a title, and
// either one polyline per series with a legend or one bar per run. Every element of a kind sits in
// a <g> with a class ("x-ticks", "series", "bars", ...) so tests and stylesheets can find it.
#include "report/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include <ember/core/error.h>
#include "report/report.h"

namespace ember::report {
namespace svg {

Axis nice_axis(double data_min, double data_max, int max_ticks, bool integer_steps) {
  EMBER_CHECK(max_ticks >= 2, "nice_axis: max_ticks must be >= 2, got ", max_ticks);
  Axis a;
  if (!std::isfinite(data_min) || !std::isfinite(data_max) || data_min > data_max) {
    data_min = 0;
    data_max = 1;
  }
  if (data_min == data_max) {  // one value: widen so it sits inside a real range
    const double pad = data_min == 0 ? 1.0 : std::abs(data_min) * 0.1;
    data_min -= pad;
    data_max += pad;
  }
  const double range = data_max - data_min;
  // Start one decade below the step that would split the range exactly into max_ticks - 1
  // intervals and take the first 1-2-5 step whose outward-rounded range fits.
  double decade = std::pow(10.0, std::floor(std::log10(range / (max_ticks - 1))) - 1);
  static constexpr double kMantissas[] = {1, 2, 5};
  // The slack absorbs division error so a value that is a multiple of the step (0.3 / 0.1) is not
  // pushed one step outward.
  constexpr double kSlack = 1e-9;
  for (int guard = 0; guard < 40; ++guard, decade *= 10) {
    for (double m : kMantissas) {
      const double step = m * decade;
      if (integer_steps && step < 1) continue;
      const double first = std::floor(data_min / step + kSlack);
      const double last = std::ceil(data_max / step - kSlack);
      if (last - first > max_ticks - 1) continue;
      a.step = step;
      for (double i = first; i <= last + 0.5; i += 1) a.ticks.push_back(i * step);
      // i * step can miss a data bound by an ulp; the axis must still contain the data.
      a.ticks.front() = std::min(a.ticks.front(), data_min);
      a.ticks.back() = std::max(a.ticks.back(), data_max);
      a.lo = a.ticks.front();
      a.hi = a.ticks.back();
      return a;
    }
  }
  EMBER_ASSERT(false, "nice_axis found no step for [", data_min, ", ", data_max, "]");
  return a;
}

std::string format_tick(double v, double step) {
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  if (std::abs(v) < step * 1e-6) v = 0;  // 0.1 * 3 - 0.3 style residue must print as 0, not -0.0
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string s = buf;
  if (s.find_first_not_of("-0.") == std::string::npos && s[0] == '-') s.erase(0, 1);
  return s;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace svg

namespace {

// Layout in SVG user units. The right margin grows with the longest legend label instead of
// truncating it: a run label is what the reader needs to identify the line.
constexpr double kPlotLeft = 80, kPlotTop = 50, kPlotWidth = 520, kPlotHeight = 330;
constexpr double kCharWidth = 7;  // rough width of a 12px sans-serif character, for sizing margins

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

struct Frame {
  double width, height;
  svg::Axis x, y;
  double left = kPlotLeft, top = kPlotTop, right = kPlotLeft + kPlotWidth, bottom = kPlotTop + kPlotHeight;
  double px(double v) const { return left + (v - x.lo) / (x.hi - x.lo) * (right - left); }
  double py(double v) const { return bottom - (v - y.lo) / (y.hi - y.lo) * (bottom - top); }
};

void open_svg(std::ostringstream& os, const Frame& f, const std::string& title) {
  os << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
     << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(f.width) << "\" height=\"" << num(f.height)
     << "\" viewBox=\"0 0 " << num(f.width) << " " << num(f.height)
     << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
     << "<title>" << svg::xml_escape(title) << "</title>\n"
     << "<rect class=\"background\" x=\"0\" y=\"0\" width=\"" << num(f.width) << "\" height=\"" << num(f.height)
     << "\" fill=\"white\"/>\n"
     << "<text class=\"title\" x=\"" << num((f.left + f.right) / 2) << "\" y=\"28\" text-anchor=\"middle\" "
     << "font-size=\"16\">" << svg::xml_escape(title) << "</text>\n";
}

// Grid lines and tick labels of the y axis; x ticks only when `x_ticks` (bar charts label
// categories instead). Then the plot box and the axis labels.
void draw_axes(std::ostringstream& os, const Frame& f, bool x_ticks, const std::string& x_label,
               const std::string& y_label) {
  os << "<g class=\"grid\" stroke=\"#e6e6e6\" stroke-width=\"1\">\n";
  for (double t : f.y.ticks)
    os << "<line x1=\"" << num(f.left) << "\" y1=\"" << num(f.py(t)) << "\" x2=\"" << num(f.right) << "\" y2=\""
       << num(f.py(t)) << "\"/>\n";
  if (x_ticks)
    for (double t : f.x.ticks)
      os << "<line x1=\"" << num(f.px(t)) << "\" y1=\"" << num(f.top) << "\" x2=\"" << num(f.px(t)) << "\" y2=\""
         << num(f.bottom) << "\"/>\n";
  os << "</g>\n";
  os << "<rect class=\"plot-box\" x=\"" << num(f.left) << "\" y=\"" << num(f.top) << "\" width=\""
     << num(f.right - f.left) << "\" height=\"" << num(f.bottom - f.top)
     << "\" fill=\"none\" stroke=\"#333333\" stroke-width=\"1\"/>\n";
  if (x_ticks) {
    os << "<g class=\"x-ticks\" text-anchor=\"middle\">\n";
    for (double t : f.x.ticks)
      os << "<line x1=\"" << num(f.px(t)) << "\" y1=\"" << num(f.bottom) << "\" x2=\"" << num(f.px(t)) << "\" y2=\""
         << num(f.bottom + 5) << "\" stroke=\"#333333\"/><text x=\"" << num(f.px(t)) << "\" y=\"" << num(f.bottom + 19)
         << "\">" << svg::format_tick(t, f.x.step) << "</text>\n";
    os << "</g>\n";
  }
  os << "<g class=\"y-ticks\" text-anchor=\"end\">\n";
  for (double t : f.y.ticks)
    os << "<line x1=\"" << num(f.left - 5) << "\" y1=\"" << num(f.py(t)) << "\" x2=\"" << num(f.left) << "\" y2=\""
       << num(f.py(t)) << "\" stroke=\"#333333\"/><text x=\"" << num(f.left - 8) << "\" y=\"" << num(f.py(t) + 4)
       << "\">" << svg::format_tick(t, f.y.step) << "</text>\n";
  os << "</g>\n";
  if (!x_label.empty())
    os << "<text class=\"x-label\" x=\"" << num((f.left + f.right) / 2) << "\" y=\"" << num(f.bottom + 42)
       << "\" text-anchor=\"middle\">" << svg::xml_escape(x_label) << "</text>\n";
  const double cy = (f.top + f.bottom) / 2;
  os << "<text class=\"y-label\" x=\"20\" y=\"" << num(cy) << "\" text-anchor=\"middle\" transform=\"rotate(-90 20 "
     << num(cy) << ")\">" << svg::xml_escape(y_label) << "</text>\n";
}

// Color and dash of the i-th series: the palette, then the palette again dashed.
std::string stroke_style(size_t i) {
  std::string s = std::string("stroke=\"") + svg::kPalette[i % svg::kPalette.size()] + "\"";
  if ((i / svg::kPalette.size()) % 2 == 1) s += " stroke-dasharray=\"6 3\"";
  return s;
}

bool finite_point(const Series& s, size_t i) { return std::isfinite(s.x[i]) && std::isfinite(s.y[i]); }

}  // namespace

std::string svg_line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<Series>& series) {
  // Only finite points are drawn (a diverged loss is NaN); a series without any is skipped.
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min, y_min = x_min, y_max = -x_min;
  bool x_integral = true;
  std::vector<size_t> drawn;
  size_t longest_label = 0;
  for (size_t s = 0; s < series.size(); ++s) {
    const Series& sr = series[s];
    EMBER_CHECK(sr.x.size() == sr.y.size(), "svg_line_chart '", title, "': series '", sr.label, "' has ", sr.x.size(),
                " x values but ", sr.y.size(), " y values");
    bool any = false;
    for (size_t i = 0; i < sr.x.size(); ++i) {
      if (!finite_point(sr, i)) continue;
      any = true;
      x_min = std::min(x_min, sr.x[i]);
      x_max = std::max(x_max, sr.x[i]);
      y_min = std::min(y_min, sr.y[i]);
      y_max = std::max(y_max, sr.y[i]);
      x_integral = x_integral && sr.x[i] == std::floor(sr.x[i]);
    }
    if (any) {
      drawn.push_back(s);
      longest_label = std::max(longest_label, sr.label.size());
    }
  }

  Frame f{};
  f.x = svg::nice_axis(x_min, x_max, 9, x_integral);  // epochs: no fractional ticks
  f.y = svg::nice_axis(y_min, y_max, 7);
  f.width = std::max(800.0, f.right + 50 + kCharWidth * static_cast<double>(longest_label));
  f.height = f.bottom + 60;

  std::ostringstream os;
  open_svg(os, f, title);
  draw_axes(os, f, true, x_label, y_label);
  os << "<g class=\"series\" fill=\"none\" stroke-width=\"2\">\n";
  for (size_t k = 0; k < drawn.size(); ++k) {
    const Series& sr = series[drawn[k]];
    os << "<polyline " << stroke_style(k) << " points=\"";
    bool first = true;
    for (size_t i = 0; i < sr.x.size(); ++i) {
      if (!finite_point(sr, i)) continue;
      os << (first ? "" : " ") << num(f.px(sr.x[i])) << "," << num(f.py(sr.y[i]));
      first = false;
    }
    os << "\"/>\n";
  }
  os << "</g>\n";
  // Point markers make short runs (a few epochs, or one) readable; long runs would be cluttered.
  constexpr size_t kMaxMarkedPoints = 40;
  os << "<g class=\"markers\">\n";
  for (size_t k = 0; k < drawn.size(); ++k) {
    const Series& sr = series[drawn[k]];
    if (sr.x.size() > kMaxMarkedPoints) continue;
    for (size_t i = 0; i < sr.x.size(); ++i)
      if (finite_point(sr, i))
        os << "<circle cx=\"" << num(f.px(sr.x[i])) << "\" cy=\"" << num(f.py(sr.y[i])) << "\" r=\"2.5\" fill=\""
           << svg::kPalette[k % svg::kPalette.size()] << "\"/>\n";
  }
  os << "</g>\n";
  os << "<g class=\"legend\">\n";
  for (size_t k = 0; k < drawn.size(); ++k) {
    const double y = f.top + 8 + 20 * static_cast<double>(k);
    os << "<line x1=\"" << num(f.right + 15) << "\" y1=\"" << num(y) << "\" x2=\"" << num(f.right + 40) << "\" y2=\""
       << num(y) << "\" " << stroke_style(k) << " stroke-width=\"2\"/><text x=\"" << num(f.right + 46) << "\" y=\""
       << num(y + 4) << "\">" << svg::xml_escape(series[drawn[k]].label) << "</text>\n";
  }
  os << "</g>\n";
  if (drawn.empty())
    os << "<text class=\"no-data\" x=\"" << num((f.left + f.right) / 2) << "\" y=\"" << num((f.top + f.bottom) / 2)
       << "\" text-anchor=\"middle\" fill=\"#888888\">no data</text>\n";
  os << "</svg>\n";
  return os.str();
}

std::string svg_bar_chart(const std::string& title, const std::string& y_label, const std::vector<std::string>& labels,
                          const std::vector<double>& values) {
  EMBER_CHECK(labels.size() == values.size(), "svg_bar_chart '", title, "': ", labels.size(), " labels but ",
              values.size(), " values");
  // Bars grow from 0, so the axis always contains 0; a non-finite value gets no bar, only "n/a".
  double lo = 0, hi = 0;
  size_t longest_label = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isfinite(values[i])) {
      lo = std::min(lo, values[i]);
      hi = std::max(hi, values[i]);
    }
    longest_label = std::max(longest_label, labels[i].size());
  }
  Frame f{};
  f.y = svg::nice_axis(lo, hi, 7);
  f.x = svg::Axis{0, std::max<double>(1, static_cast<double>(values.size())), 1, {}};
  f.width = f.right + 40;  // no legend: the categories name the bars
  // Category labels are drawn slanted below the axis; the bottom margin grows with the longest.
  f.height = f.bottom + 40 + std::min(200.0, 0.6 * kCharWidth * static_cast<double>(longest_label));

  std::ostringstream os;
  open_svg(os, f, title);
  draw_axes(os, f, false, "", y_label);
  const double slot = (f.right - f.left) / f.x.hi;
  const double bar_width = slot * 0.6;
  os << "<g class=\"bars\">\n";
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) continue;
    const double x = f.left + slot * (static_cast<double>(i) + 0.2);
    const double y0 = f.py(0), y1 = f.py(values[i]);
    os << "<rect class=\"bar\" x=\"" << num(x) << "\" y=\"" << num(std::min(y0, y1)) << "\" width=\"" << num(bar_width)
       << "\" height=\"" << num(std::abs(y0 - y1)) << "\" fill=\"" << svg::kPalette[i % svg::kPalette.size()]
       << "\"><title>" << svg::xml_escape(labels[i]) << "</title></rect>\n";
  }
  os << "</g>\n";
  os << "<g class=\"values\" text-anchor=\"middle\" font-size=\"11\">\n";
  for (size_t i = 0; i < values.size(); ++i) {
    const double cx = f.left + slot * (static_cast<double>(i) + 0.5);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", values[i]);
    const bool ok = std::isfinite(values[i]);
    const double y = ok ? std::min(f.py(0), f.py(values[i])) - 4 : f.py(0) - 4;
    os << "<text x=\"" << num(cx) << "\" y=\"" << num(y) << "\">" << (ok ? buf : "n/a") << "</text>\n";
  }
  os << "</g>\n";
  os << "<g class=\"categories\" text-anchor=\"end\">\n";
  for (size_t i = 0; i < labels.size(); ++i) {
    const double cx = f.left + slot * (static_cast<double>(i) + 0.5), y = f.bottom + 16;
    os << "<text x=\"" << num(cx) << "\" y=\"" << num(y) << "\" transform=\"rotate(-30 " << num(cx) << " " << num(y)
       << ")\">" << svg::xml_escape(labels[i]) << "</text>\n";
  }
  os << "</g>\n</svg>\n";
  return os.str();
}

}  // namespace ember::report
