#pragma once
// Helpers for the op lists of the op-family headers (EMBER_UNARY_OPS and EMBER_BINARY_OPS in
// kernels/elementwise.h, EMBER_REDUCE_OPS in kernels/reduce.h). A list is an X-macro with one row
// per op, X(Name, "name", properties...); these macros turn a list into its enum, a constexpr
// table of its rows and a visit function, so that adding a row is all an op needs outside its math.
#include <cstdint>
#include <type_traits>

#include <ember/core/error.h>

/// Defines `enum class Enum : uint8_t` with one enumerator per row of LIST, in list order.
#define EMBER_DEFINE_OP_ENUM(Enum, LIST) enum class Enum : uint8_t { LIST(EMBER_OP_ENUMERATOR_) };
#define EMBER_OP_ENUMERATOR_(Name, ...) Name,

/// Defines the list as a table, after the enum and the row type Info (whose first field is
/// `const char* name`): `inline constexpr Info k<Enum>Rows[]`, one Info per row of LIST as the
/// macro ROW writes it (`{"name", ...},`), `op_info(Enum)` (the row of an op), `op_name(Enum)`
/// and visit_op(Enum, visit).
#define EMBER_DEFINE_OP_TABLE(Enum, Info, LIST, ROW)                                     \
  inline constexpr Info k##Enum##Rows[] = {LIST(ROW)};                                   \
  constexpr const Info& op_info(Enum op) { return k##Enum##Rows[static_cast<int>(op)]; } \
  constexpr const char* op_name(Enum op) { return op_info(op).name; }                    \
  EMBER_DEFINE_VISIT_OP(Enum, LIST)

/// Defines `visit_op(Enum op, visit)` (host code): calls visit(std::integral_constant<Enum, op>{})
/// so the op becomes a compile-time constant, and returns what it returns; one switch case per row
/// of LIST. An op outside the list is an error.
#define EMBER_DEFINE_VISIT_OP(Enum, LIST)                                      \
  template <typename Visit> decltype(auto) visit_op(Enum op, Visit&& visit) {  \
    using Op = Enum;                                                           \
    switch (op) { LIST(EMBER_OP_VISIT_CASE_) }                                 \
    EMBER_FAIL("visit_op: ", static_cast<int>(op), " is not a row of " #LIST); \
  }
#define EMBER_OP_VISIT_CASE_(Name, ...) \
  case Op::Name:                        \
    return visit(std::integral_constant<Op, Op::Name>{});
