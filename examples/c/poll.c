/* Waiting with poll(): rank 1 takes rank 0's messages with volley_try_recv and, when none has
 * arrived (VOLLEY_EAGAIN), sleeps in poll() on the endpoint's descriptor, as an event loop
 * would. Rank 0 sends `count` messages with pauses, so that rank 1 really sleeps.
 *
 *   volley run -n 2 examples/c/poll [count] */
#include "check.h"
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
    unsigned count = argc > 1 ? (unsigned)atoi(argv[1]) : 20;
    volley_world *w;
    volley_endpoint *ep;
    size_t rank, size;
    CHECK(volley_init(&w));
    CHECK(volley_world_info(w, &rank, &size, NULL));
    if (size != 2) {
        fprintf(stderr, "poll needs 2 ranks\n");
        return 1;
    }
    CHECK(volley_open(w, 3, &ep));
    CHECK(volley_target(ep, 1 - rank, 3));
    if (rank == 0) {
        for (unsigned i = 0; i < count; i++) {
            struct timespec pause = {0, 2 * 1000 * 1000};
            nanosleep(&pause, NULL);
            CHECK(volley_send(ep, &i, sizeof i));
        }
        unsigned done;
        CHECK(volley_recv_into(ep, &done, sizeof done, NULL, NULL, NULL));
    } else {
        int fd;
        CHECK(volley_fd(ep, &fd));
        unsigned got = 0, sleeps = 0;
        while (got < count) {
            volley_message *m;
            int rc = volley_try_recv(ep, &m);
            if (rc == VOLLEY_EAGAIN) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (poll(&p, 1, 10000) <= 0) {
                    fprintf(stderr, "poll: no wake-up within 10 s with %u of %u messages in\n",
                            got, count);
                    return 1;
                }
                sleeps++;
                continue;
            }
            CHECK(rc);
            const void *data;
            size_t len;
            unsigned v;
            CHECK(volley_message_data(m, &data, &len));
            memcpy(&v, data, sizeof v);
            if (len != sizeof v || v != got) {
                fprintf(stderr, "message %u: got %u (%zu bytes)\n", got, v, len);
                return 1;
            }
            CHECK(volley_message_release(m));
            got++;
        }
        CHECK(volley_send(ep, &got, sizeof got));
        printf("result: poll received=%u sleeps=%u\n", got, sleeps);
    }
    CHECK(volley_close(ep));
    CHECK(volley_finalize(w));
    return 0;
}
