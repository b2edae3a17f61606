// Fuzz harness: the experiment config loader and validator (train/config.h load_config, with
// key=value overrides). The input is the config file's text; the bytes after its first NUL are
// overrides, one per NUL-separated piece (JSON text never holds a raw NUL, so a real config file
// is a valid input as it is). A config that loads must survive to_json and parse_config unchanged
// (config.h: parse_config(to_json(c)) == c); a refusal is an ember::Error naming the file or the
// override at fault.
#include <string>
#include <vector>

#include <ember/train/config.h>

#include "fuzz_support.h"

namespace ember::fuzz {

bool fuzz_one(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  std::vector<std::string> overrides;
  if (nul != std::string::npos) {
    for (size_t begin = nul + 1;;) {
      const size_t end = input.find('\0', begin);
      overrides.push_back(input.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
      if (end == std::string::npos) break;
      begin = end + 1;
    }
  }
  const std::string text = input.substr(0, nul);
  const std::string path = write_scratch("config.json", reinterpret_cast<const uint8_t*>(text.data()), text.size());
  train::ExperimentConfig cfg;
  try {
    cfg = train::load_config(path, overrides);
  } catch (const Error& e) {
    // Errors start with where the bad value came from: the file or "override '<text>'".
    last_error() = e.message();
    if (e.message().find(path) == std::string::npos && e.message().rfind("override '", 0) != 0)
      violation("the error names neither the file " + path + " nor an override: " + e.message());
    return false;
  }
  std::string json;
  try {
    json = train::to_json(cfg);
    if (!(train::parse_config(json) == cfg)) violation("parse_config(to_json(c)) != c for c =\n" + json);
  } catch (const Error& e) {
    violation("to_json's output of a valid config is refused: " + e.message() + "\n" + json);
  }
  return true;
}

}  // namespace ember::fuzz
