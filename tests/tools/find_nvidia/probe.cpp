// Probe of the find_nvidia/pip test: linked against CUDNN::cudnn and NCCL::nccl as found by ember's
// find modules, it checks that the libraries were loaded from the folders they were found in (the
// build RPATH must cover a versioned-only libcudnn.so.9; the system's copies must not stand in)
// and that the versions parsed from the headers are the libraries' own, i.e. the header and the
// library came from one install. Needs no GPU: both calls only report a compiled-in constant.
//
// The prototypes are declared here rather than taken from cudnn.h / nccl.h, which include the CUDA
// runtime headers: the test hides the toolkit, and only linking and loading are under test.
#include <dlfcn.h>
#include <link.h>

#include <cstddef>
#include <cstdio>
#include <string>

extern "C" std::size_t cudnnGetVersion(void);
extern "C" int ncclGetVersion(int* version);  // returns ncclResult_t, an int-sized enum; 0 = success

// 0 when the already loaded <soname> came from <dir>/<soname>, else 1 after saying where it came from.
static int check_loaded_from(const char* soname, const std::string& dir) {
  void* handle = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD);
  link_map* map = nullptr;
  if (handle == nullptr || dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) {
    std::printf("probe: %s is not loaded (%s)\n", soname, dlerror());
    return 1;
  }
  const std::string path = map->l_name;
  dlclose(handle);
  if (path != dir + "/" + soname) {
    std::printf("probe: %s was loaded from %s, expected %s/%s\n", soname, path.c_str(), dir.c_str(), soname);
    return 1;
  }
  return 0;
}

int main() {
  int failures = 0;
  failures += check_loaded_from(EXPECT_CUDNN_SONAME, EXPECT_CUDNN_DIR);
  failures += check_loaded_from(EXPECT_NCCL_SONAME, EXPECT_NCCL_DIR);
  const std::size_t cudnn = cudnnGetVersion();
  if (cudnn != static_cast<std::size_t>(EXPECT_CUDNN)) {
    std::printf("probe: cudnnGetVersion() = %zu, but CUDNN_VERSION from the header gives %d\n", cudnn, EXPECT_CUDNN);
    ++failures;
  }
  int nccl = -1;
  const int rc = ncclGetVersion(&nccl);
  if (rc != 0 || nccl != EXPECT_NCCL) {
    std::printf("probe: ncclGetVersion() = %d (result %d), but NCCL_VERSION from the header gives %d\n", nccl, rc,
                EXPECT_NCCL);
    ++failures;
  }
  if (failures == 0) {
    std::printf("probe: cuDNN %zu and NCCL %d loaded, matching their headers\n", cudnn, nccl);
  }
  return failures == 0 ? 0 : 1;
}
