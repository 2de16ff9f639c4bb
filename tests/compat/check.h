/* Shared by the C verbs programs of tests/compat: CHECK(cond, fmt, ...) exits 1 naming the failed
 * condition and what the program saw; the two buffers each side registers. */
#ifndef WEFT_TESTS_COMPAT_CHECK_H
#define WEFT_TESTS_COMPAT_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                                    \
            fprintf(stderr, "\n");                                                           \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

enum { buffer_size = 4096, port = 1 };

static char buf_a[buffer_size] __attribute__((aligned(64)));
static char buf_b[buffer_size] __attribute__((aligned(64)));

#endif
