/* The C API used wrongly gets its documented codes, never a crash, and loses nothing: NULL
 * handles, a port opened twice, a send with no target, unknown ranks, a buffer too small (the
 * message stays queued and is then received whole), a message released twice, a spent request,
 * a bad wait mode. Each failure leaves a message in volley_last_error().
 *
 *   volley run -n 2 examples/c/misuse */
#include <volley.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks;

static void expect(int got, int want, const char *what, int line) {
    checks++;
    if (got != want) {
        fprintf(stderr, "misuse.c:%d: %s gave %d (%s), expected %d (%s); last error: %s\n", line,
                what, got, volley_strerror(got), want, volley_strerror(want),
                volley_last_error());
        exit(1);
    }
    if (want != VOLLEY_OK && strlen(volley_last_error()) == 0) {
        fprintf(stderr, "misuse.c:%d: %s failed without saying why\n", line, what);
        exit(1);
    }
}
#define EXPECT(call, want) expect((call), (want), #call, __LINE__)

int main(void) {
    volley_world *w;
    volley_endpoint *ep, *again;
    size_t rank, size;
    EXPECT(volley_init(NULL), VOLLEY_EINVAL);
    EXPECT(volley_init(&w), VOLLEY_OK);
    EXPECT(volley_world_info(NULL, &rank, NULL, NULL), VOLLEY_EINVAL);
    EXPECT(volley_world_info(w, &rank, &size, NULL), VOLLEY_OK);
    if (size != 2) {
        fprintf(stderr, "misuse needs 2 ranks\n");
        return 1;
    }
    EXPECT(volley_open(NULL, 1, &ep), VOLLEY_EINVAL);
    EXPECT(volley_open(w, 1, &ep), VOLLEY_OK);
    EXPECT(volley_open(w, 1, &again), VOLLEY_EPORT);
    char small[10], big[100];
    EXPECT(volley_send(ep, big, sizeof big), VOLLEY_ENOTARGET);
    volley_request req = 0;
    EXPECT(volley_isend(ep, big, sizeof big, &req), VOLLEY_ENOTARGET);
    EXPECT(volley_target(ep, 99, 1), VOLLEY_ENORANK);
    EXPECT(volley_send_to(ep, 99, 1, big, sizeof big), VOLLEY_ENORANK);
    EXPECT(volley_send(ep, NULL, 5), VOLLEY_EINVAL);
    EXPECT(volley_set_wait_mode(ep, 42, 0), VOLLEY_EINVAL);
    EXPECT(volley_wait(w, &req), VOLLEY_EINVAL); /* 0: no request */
    EXPECT(volley_target(ep, 1 - rank, 1), VOLLEY_OK);
    if (rank == 1) {
        for (int i = 0; i < (int)sizeof big; i++) big[i] = (char)i;
        EXPECT(volley_send(ep, big, sizeof big), VOLLEY_OK);
        EXPECT(volley_isend(ep, big, 7, &req), VOLLEY_OK);
        EXPECT(volley_wait(w, &req), VOLLEY_OK);
        if (req != 0) {
            fprintf(stderr, "a completed request was not set to 0\n");
            return 1;
        }
        EXPECT(volley_wait(w, &req), VOLLEY_EINVAL); /* spent */
        EXPECT(volley_recv_into(ep, small, sizeof small, NULL, NULL, NULL), VOLLEY_OK);
    } else {
        volley_message *m;
        size_t len = 0, src = 9;
        const void *data;
        /* Too small: an error, and the message stays queued... */
        EXPECT(volley_recv_into(ep, small, sizeof small, &len, &src, NULL), VOLLEY_ETRUNC);
        /* ...so it is there at once, whole. */
        EXPECT(volley_try_recv(ep, &m), VOLLEY_OK);
        EXPECT(volley_message_data(m, &data, &len), VOLLEY_OK);
        for (size_t i = 0; i < len; i++)
            if (((const char *)data)[i] != (char)i) len = 0;
        if (len != sizeof big) {
            fprintf(stderr, "the message kept after ETRUNC came back wrong\n");
            return 1;
        }
        EXPECT(volley_message_release(m), VOLLEY_OK);
        EXPECT(volley_message_release(m), VOLLEY_EINVAL);
        EXPECT(volley_message_data(m, &data, &len), VOLLEY_EINVAL);
        EXPECT(volley_recv_into(ep, big, sizeof big, &len, &src, NULL), VOLLEY_OK);
        if (len != 7 || src != 1 || memcmp(big, "\x00\x01\x02\x03\x04\x05\x06", 7) != 0) {
            fprintf(stderr, "the isend's message came as %zu bytes from %zu\n", len, src);
            return 1;
        }
        EXPECT(volley_try_recv(ep, &m), VOLLEY_EAGAIN);
        EXPECT(volley_send(ep, "ok", 2), VOLLEY_OK);
    }
    EXPECT(volley_message_release(NULL), VOLLEY_EINVAL);
    EXPECT(volley_close(NULL), VOLLEY_EINVAL);
    EXPECT(volley_unbind(NULL), VOLLEY_EINVAL);
    EXPECT(volley_bind(w, 5, NULL, NULL, NULL), VOLLEY_EINVAL);
    for (int c = VOLLEY_OK; c <= VOLLEY_EINTERNAL + 1; c++)
        if (volley_strerror(c) == NULL || volley_strerror(c)[0] == 0) return 1;
    EXPECT(volley_close(ep), VOLLEY_OK);
    EXPECT(volley_finalize(w), VOLLEY_OK);
    printf("result: misuse rank=%zu checks=%d ok\n", rank, checks);
    return 0;
}
