#pragma once
// ember-report --profile: a run's profile (RUN_DIR/profile/trace.json, as ember-train and the
// examples' --profile write it; one or several ranks) as the per-span table, the verdict
// (profiler/verdict.h) and an SVG timeline of the last kept step.
#include <string>
#include <vector>

#include <ember/profiler/trace_reader.h>

namespace ember::report {

/// The trace of `path`: a run directory (its profile/trace.json) or a trace file itself. Errors:
/// no such path; a directory without profile/trace.json (the message asks whether it was profiled).
std::string profile_trace_path(const std::string& path);

/// The timeline of the last kept step (the highest `step N` of any rank; the whole trace when it
/// has no step spans): one row per rank, a sub-row per thread with spans, nested spans stacked by
/// depth, coloured by category (a legend), a time axis in ms from the step's start. Each span's
/// <title> holds its name, duration and input shapes.
std::string svg_profile_timeline(const std::vector<profiler::RankProfile>& ranks);

/// What ember-report --profile prints and writes to profile.md: a heading naming the trace, the
/// table (the top 30 spans of all ranks by total time) and the verdict.
std::string profile_text(const std::vector<profiler::RankProfile>& ranks, const std::string& trace_path);

/// Reads the trace of `path` (profile_trace_path) and writes out_dir/profile.md (profile_text, the
/// timeline linked) and out_dir/profile_timeline.svg; creates out_dir. Returns profile_text.
std::string write_profile_report(const std::string& path, const std::string& out_dir);

}  // namespace ember::report
