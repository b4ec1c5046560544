/* The examples' error handling: a failed volley call prints where, the code's name and
 * volley_last_error() (which says what to do), and exits. */
#ifndef VOLLEY_EXAMPLES_CHECK_H
#define VOLLEY_EXAMPLES_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <volley.h>

#define CHECK(call)                                                                        \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ != VOLLEY_OK) {                                                            \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,             \
                    volley_strerror(rc_), volley_last_error());                            \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#endif
