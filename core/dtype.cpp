#include <ember/core/dtype.h>

namespace ember {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f64:
      return "f64";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::boolean:
      return "bool";
  }
  return "?";
}

DType dtype_from_string(const std::string& s) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::boolean})
    if (s == dtype_name(t)) return t;
  EMBER_FAIL("unknown dtype '", s, "' (expected one of f32, f64, f16, bf16, i32, i64, u8, bool)");
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType t) {  // position in the promotion lattice
    switch (t) {
      case DType::boolean:
        return 0;
      case DType::u8:
        return 1;
      case DType::i32:
        return 2;
      case DType::i64:
        return 3;
      case DType::f16:
        return 4;
      case DType::bf16:
        return 4;
      case DType::f32:
        return 5;
      case DType::f64:
        return 6;
    }
    return 0;
  };
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace ember
