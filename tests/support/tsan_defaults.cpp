// Compiled into every program of a ThreadSanitizer tree (EMBER_SANITIZE=thread: CMakeLists.txt adds
// it to whatever links ember::ember in the build tree), so ctest, the tools and their children all
// start with these; TSAN_OPTIONS in the environment still adds to them. docs/testing.md lists why.

// TSan kills a child of a multi-threaded fork() that starts threads, since a lock another parent
// thread held could hang it. ember's thread pool parks its workers before a fork and gives the child
// a fresh pool ("a forked child gets a working pool of its own" checks it): let that run.
extern "C" const char* __tsan_default_options() { return "die_after_fork=0"; }

// One suppression, for a frame of libstdc++ (not built with TSan): std::exception_ptr and a catch
// handler share an exception through a reference count in libstdc++'s own atomics, which TSan does
// not see. When a thread that stored the error in an exception_ptr (a tcp process group's progress
// thread finishing a Work) drops the last reference after the thread that caught it is done, TSan
// reports the exception's destruction as racing with the catch handler's reads: a false positive.
extern "C" const char* __tsan_default_suppressions() {
  return "race:std::__exception_ptr::exception_ptr::_M_release\n";
}
