/* GAMMA active ports from C: rank 0 binds port 7 with a handler (a C function and a user
 * pointer); every other rank sends it `count` numbered messages. The handler runs for each one
 * while rank 0 makes progress, checks it and answers the sender on port 8 once its last one is
 * in. Prints the totals.
 *
 *   volley run -n 4 examples/c/active [count] */
#include "check.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tally {
    volley_endpoint *reply; /* to answer the senders */
    uint64_t count;         /* messages expected from each sender */
    uint64_t next[256];     /* next number expected from each rank */
    uint64_t received;
    uint64_t bad;
};

/* `port` is the port the message was sent from: the senders' endpoints are on port 8. */
static void on_message(void *user, const void *data, size_t len, size_t rank, uint32_t port) {
    struct tally *t = user;
    uint64_t v[2];
    if (len != sizeof v || rank >= 256 || port != 8) {
        t->bad++;
        return;
    }
    memcpy(v, data, sizeof v);
    if (v[0] != t->next[rank] || v[1] != v[0] * 3 + rank) {
        t->bad++;
        return;
    }
    t->next[rank]++;
    t->received++;
    if (t->next[rank] == t->count) {
        uint64_t ok = t->count;
        if (volley_send_to(t->reply, rank, 8, &ok, sizeof ok) != VOLLEY_OK) t->bad++;
    }
}

int main(int argc, char **argv) {
    uint64_t count = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000;
    volley_world *w;
    size_t rank, size;
    CHECK(volley_init(&w));
    CHECK(volley_world_info(w, &rank, &size, NULL));
    if (size < 2 || size > 256) {
        fprintf(stderr, "active needs 2 to 256 ranks\n");
        return 1;
    }
    volley_endpoint *ep;
    CHECK(volley_open(w, 8, &ep));
    if (rank == 0) {
        static struct tally t;
        t.reply = ep;
        t.count = count;
        volley_active_port *port;
        CHECK(volley_bind(w, 7, on_message, &t, &port));
        /* Tell the senders the port is bound. */
        for (size_t r = 1; r < size; r++) CHECK(volley_send_to(ep, r, 8, "go", 2));
        uint64_t want = count * (size - 1);
        while (t.received < want && t.bad == 0) CHECK(volley_progress(w));
        printf("result: active received=%llu bad=%llu\n", (unsigned long long)t.received,
               (unsigned long long)t.bad);
        CHECK(volley_unbind(port));
        if (t.bad) return 1;
    } else {
        char go[2];
        CHECK(volley_recv_into(ep, go, sizeof go, NULL, NULL, NULL));
        CHECK(volley_target(ep, 0, 7));
        for (uint64_t i = 0; i < count; i++) {
            uint64_t v[2] = {i, i * 3 + rank};
            CHECK(volley_send(ep, v, sizeof v));
        }
        uint64_t ok = 0;
        CHECK(volley_recv_into(ep, &ok, sizeof ok, NULL, NULL, NULL));
        if (ok != count) {
            fprintf(stderr, "rank %zu: rank 0 confirmed %llu messages, not %llu\n", rank,
                    (unsigned long long)ok, (unsigned long long)count);
            return 1;
        }
    }
    CHECK(volley_close(ep));
    CHECK(volley_finalize(w));
    return 0;
}
