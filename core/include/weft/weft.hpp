// weft/weft.hpp — the umbrella header: everything an application needs.
//
//   #include <weft/weft.hpp>
//
//   int main() {
//       auto dom = weft::open();   // backend from $WEFT_BACKEND, default "sim"
//       ...
//   }
//
// See docs/concepts.md for the objects and docs/semantics.md for what every backend guarantees.
#pragma once

#include <weft/completion.hpp>
#include <weft/config.hpp>
#include <weft/domain.hpp>
#include <weft/error.hpp>
#include <weft/listener.hpp>
#include <weft/log.hpp>
#include <weft/memory.hpp>
#include <weft/request.hpp>
#include <weft/status.hpp>
#include <weft/types.hpp>
#include <weft/version.hpp>
