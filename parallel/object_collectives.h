#pragma once
// Collectives on strings, for the bookkeeping of a distributed run: comparing the ranks' models,
// agreeing on a run directory, and letting rank 0 do file work that every rank must hear about.
#include <functional>
#include <string>
#include <vector>

#include <ember/parallel/process_group.h>

namespace ember::parallel {

/// Every rank's `text`, in rank order. Collective.
std::vector<std::string> all_gather_strings(ProcessGroup& group, const std::string& text);
/// Rank `root`'s `text` on every rank. Collective.
std::string broadcast_string(ProcessGroup& group, const std::string& text, int root = 0);
/// Runs `fn` on rank `root` only and hands its result to every rank; when it throws, every rank
/// throws an ember::Error with its message (so a failed write on rank 0 stops all ranks at once
/// instead of leaving them waiting in the next collective). Collective.
std::string run_on_root(ProcessGroup& group, const std::function<std::string()>& fn, int root = 0);

}  // namespace ember::parallel
