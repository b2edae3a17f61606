#pragma once
// Helpers behind the SVG charts of tools/report/report.h (svg_line_chart, svg_bar_chart): "nice"
// axis ticks, tick labels, XML escaping and the series palette. Exposed so tests can check them alone.
#include <array>
#include <string>
#include <vector>

namespace ember::report::svg {

/// An axis range and its tick values. Ticks are multiples of `step` (1, 2 or 5 times a power of
/// ten); lo and hi are the first and last tick, so the ticks cover the data and the axis ends on
/// labelled values.
struct Axis {
  double lo = 0, hi = 1, step = 1;
  std::vector<double> ticks;  // ascending, ticks.front() == lo, ticks.back() == hi
};

/// The smallest 1-2-5 step whose loose range [floor(min/step), ceil(max/step)] * step needs at most
/// `max_ticks` ticks. integer_steps: step >= 1 (epochs). A degenerate range (min == max) is widened
/// around the value; non-finite bounds give [0, 1].
Axis nice_axis(double data_min, double data_max, int max_ticks = 7, bool integer_steps = false);

/// `v` with as many decimals as `step` needs ("0.25" for step 0.05, "1500" for step 500); never "-0".
std::string format_tick(double v, double step);

/// Escapes & < > " ' for XML text and attribute values.
std::string xml_escape(const std::string& s);

/// Series colors (Tableau 10), used in order; series beyond it repeat the colors dashed.
inline constexpr std::array<const char*, 10> kPalette = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                                         "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

}  // namespace ember::report::svg
