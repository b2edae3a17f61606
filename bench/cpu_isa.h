#pragma once
// The CPU a CPU benchmark ran on, for the line its figures are quoted with, and `--isa avx2`: both
// programs limited to AVX2 and FMA on an AVX-512 machine, so that a figure for the CPUs without
// AVX-512 (issue 30's) can be measured on one that has it.
//
// ember's own loops never go past x86-64-v3 (AVX2, FMA; kernels/cpu/loops.h); its GEMMs are
// OpenBLAS's, which picks its kernels when it is loaded: OPENBLAS_CORETYPE=Haswell makes them
// AVX2. PyTorch's are ATen's (ATEN_CPU_CAPABILITY), oneDNN's (ONEDNN_MAX_CPU_ISA; DNNL_ before
// oneDNN 2) and MKL's (MKL_ENABLE_INSTRUCTIONS). OpenBLAS reads its variable before main, so the
// program starts itself again with them set. bench/bench_cpu_train.sh sets the same five for
// `--isa avx2`.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace ember::bench {

/// "MODEL, AVX-512: yes|no" from /proc/cpuinfo, and ", limited to AVX2" under `--isa avx2`.
inline std::string cpu_description() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  bool avx512 = false, have_model = false, have_flags = false;
  while (std::getline(f, line) && !(have_model && have_flags)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_first_of(" \t"));
    if (key == "model" && line.compare(0, 10, "model name") == 0 && !have_model) {
      const size_t value = line.find_first_not_of(" \t", colon + 1);
      model = value == std::string::npos ? "" : line.substr(value);
      have_model = true;
    } else if (key == "flags" && !have_flags) {
      avx512 = (line + " ").find(" avx512f ") != std::string::npos;
      have_flags = true;
    }
  }
  std::string s = model + ", AVX-512: " + (avx512 ? "yes" : "no");
  const char* isa = std::getenv("EMBER_BENCH_ISA");
  if (isa != nullptr && std::strcmp(isa, "avx2") == 0) s += ", both programs limited to AVX2 (--isa avx2)";
  return s;
}

/// With `--isa avx2`, starts this program again with both programs' libraries limited to AVX2
/// (returns only when they already are). Any other --isa value, or a CPU without AVX2 and FMA,
/// exits 2.
inline void apply_isa_flag(int argc, char** argv) {
  const char* want = nullptr;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--isa") == 0) want = i + 1 < argc ? argv[i + 1] : "";
  if (want == nullptr) return;
  if (std::strcmp(want, "avx2") != 0) {
    std::fprintf(stderr, "%s: --isa takes avx2, not '%s'\n", argv[0], want);
    std::exit(2);
  }
#if defined(__x86_64__)
  const bool has_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  const bool has_avx2 = false;
#endif
  if (!has_avx2) {  // OpenBLAS's Haswell kernels would stop at their first instruction
    std::fprintf(stderr, "%s: --isa avx2: this CPU has no AVX2 and FMA to be limited to\n", argv[0]);
    std::exit(2);
  }
  const char* now = std::getenv("EMBER_BENCH_ISA");
  if (now != nullptr && std::strcmp(now, "avx2") == 0) return;
  setenv("EMBER_BENCH_ISA", "avx2", 1);
  setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  setenv("ATEN_CPU_CAPABILITY", "avx2", 1);
  setenv("ONEDNN_MAX_CPU_ISA", "AVX2", 1);
  setenv("DNNL_MAX_CPU_ISA", "AVX2", 1);
  setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2", 1);
  execv("/proc/self/exe", argv);
  std::perror("bench: starting again with --isa avx2");
  std::exit(1);
}

}  // namespace ember::bench
