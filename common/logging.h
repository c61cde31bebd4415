#pragma once

// Logging set-up shared by the binaries: glog to stderr, one short prefix
// per line ("I 13:52:01.123 server.cc:45] ..."). The launcher adds the task
// ("[ps:0] ") in front when it collects the logs.

namespace pstrain {

// Call once at the top of main.
void InitLogging(const char* argv0);

}  // namespace pstrain
