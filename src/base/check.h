// KOI_CHECK: for programmer errors only, never for user input or the environment.
// A failed check prints the condition and location and aborts.
#pragma once

#include <cstdio>
#include <cstdlib>

#define KOI_CHECK(cond)                                                              \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: KOI_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)
