#pragma once
// Facts about this build of ember, recorded in run directories and reports.

namespace ember {

/// The git commit of the source tree libember was built from: the 40-hex SHA, with "-dirty" when
/// tracked files had uncommitted changes, or "unknown" when built outside a git checkout.
/// Refreshed on every build.
const char* build_git_commit();

}  // namespace ember
