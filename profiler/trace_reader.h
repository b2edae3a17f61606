#pragma once
// Reading a Chrome trace (Trace Event Format, as Profile::write_chrome_trace and ember-train's
// profile/trace.json write it) back into spans: one RankProfile per pid, for the table, the
// verdict and ember-report --profile.
#include <string>
#include <vector>

#include <ember/profiler/verdict.h>

namespace ember::profiler {

/// The ranks of a trace, sorted by pid (rank = pid). Read: complete events ("ph": "X": name, cat,
/// ts, dur, pid, tid, args.step, args["Input Dims"]), thread names ("M" thread_name) and counters
/// ("C": the first number in args); other phases are skipped. Times become nanoseconds from the
/// earliest event of the file (so ranks stay aligned with each other); each thread's spans get
/// their nesting depth and self times; Event::thread is the thread's index in the rank's
/// thread_names (in order of tid). A rank with a "memory cuda..." counter is `cuda`.
/// Errors name the file, the JSON path and what was expected ("trace.json: traceEvents[12].dur:
/// expected a number >= 0, got \"abc\"").
std::vector<RankProfile> load_chrome_trace(const std::string& path);
/// The same, from the text of a trace; `source` names it in errors.
std::vector<RankProfile> parse_chrome_trace(const std::string& text, const std::string& source);

/// Category of a trace's "cat" ("op", "backward", ...); user for any other.
Category category_from_name(const std::string& name);

}  // namespace ember::profiler
