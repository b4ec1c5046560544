/* Matched probes of large messages (MPI-3.1 3.8.2-3.8.3): MPI_Mprobe and MPI_Improbe take a
 * message out of matching, whatever its size, so that no later receive or probe sees it; only
 * MPI_Mrecv or MPI_Imrecv with its handle receives it, into any buffer and datatype, with
 * MPI_ERR_TRUNCATE when the buffer is too small. A synchronous send completes once a matched
 * probe has taken its message. Messages are far above any eager limit, and the receiver's
 * memory shows that a matched-probed message is not copied whole before its MPI_Mrecv. */
#include "check.h"
#include <string.h>

#define MIB (1 << 20)

static void fill(unsigned char *b, size_t n, int what) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = h4(what, i, 0, 0);
        memcpy(b + i, &v, n - i < 8 ? n - i : 8);
    }
}

static int same(const unsigned char *b, size_t n, int what) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = h4(what, i, 0, 0);
        if (memcmp(b + i, &v, n - i < 8 ? n - i : 8) != 0)
            return 0;
    }
    return 1;
}

/* Sizes in bytes of the messages rank 1 sends, by tag. */
static const size_t len_of[] = {0, 400, 16 * MIB, 3 * MIB, MIB + 3, 2 * MIB, MIB, MIB, MIB, 3 * MIB};

/* Non-blocking sends, waited for together: the receiver holds some messages matched but not
 * received while it receives later ones, and a blocking send of a large message may wait for
 * its receive (MPI-3.1 3.4), so blocking sends in this order would be an unsafe program. */
static void send_all(void) {
    unsigned char *b[11];
    MPI_Request r[11];
    MPI_Status sts[11];
    int k = 0;
    /* tag 1 small, then large ones with tags 2 (twice, different data), 3 (synchronous),
     * 4 .. 9. */
    for (int tag = 1; tag <= 9; tag++) {
        b[k] = malloc(len_of[tag]);
        CHECK(b[k]);
        fill(b[k], len_of[tag], tag);
        if (tag == 3)
            OK(MPI_Issend(b[k], (int)len_of[tag], MPI_BYTE, 0, tag, MPI_COMM_WORLD, &r[k]));
        else
            OK(MPI_Isend(b[k], (int)len_of[tag], MPI_BYTE, 0, tag, MPI_COMM_WORLD, &r[k]));
        k++;
        if (tag == 2) {
            b[k] = malloc(len_of[tag]);
            CHECK(b[k]);
            fill(b[k], len_of[tag], 102);
            OK(MPI_Isend(b[k], (int)len_of[tag], MPI_BYTE, 0, tag, MPI_COMM_WORLD, &r[k]));
            k++;
        }
    }
    OK(MPI_Waitall(k, r, sts));
    for (int i = 0; i < k; i++)
        free(b[i]);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), size = world_size();
    CHECK(size >= 2);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rank == 1) {
        send_all();
    } else if (rank == 2) {
        /* Another sender: matched by source through a wildcard probe. */
        unsigned char *b = malloc(2 * MIB);
        CHECK(b);
        fill(b, 2 * MIB, 50);
        OK(MPI_Send(b, 2 * MIB, MPI_BYTE, 0, 50, MPI_COMM_WORLD));
        free(b);
    } else if (rank == 0) {
        MPI_Status st;
        MPI_Message m, m2;
        MPI_Request r[2];
        int count;
        unsigned char *a = malloc(16 * MIB), *b = malloc(16 * MIB);
        CHECK(a && b);
        memset(a, 0, 16 * MIB);
        memset(b, 0, 16 * MIB);

        /* The first message from rank 1 in order, by a wildcard matched probe. */
        OK(MPI_Mprobe(MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &m, &st));
        CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 1);
        OK(MPI_Mrecv(a, 400, MPI_BYTE, &m, &st));
        CHECK(same(a, 400, 1));

        /* Taken out of matching: a receive with the same envelope gets the second tag-2
         * message, not the one the probe took; each lands where its receive says. */
        long before = peak_kib();
        OK(MPI_Mprobe(1, 2, MPI_COMM_WORLD, &m, &st));
        OK(MPI_Get_count(&st, MPI_BYTE, &count));
        CHECK(count == 16 * MIB && st.MPI_SOURCE == 1 && st.MPI_TAG == 2);
        OK(MPI_Recv(b, 16 * MIB, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &st));
        CHECK(same(b, 16 * MIB, 102));
        OK(MPI_Mrecv(a, 16 * MIB, MPI_BYTE, &m, &st));
        CHECK(m == MPI_MESSAGE_NULL && st.MPI_SOURCE == 1 && st.MPI_TAG == 2);
        OK(MPI_Get_count(&st, MPI_BYTE, &count));
        CHECK(count == 16 * MIB && same(a, 16 * MIB, 2));
        long after = peak_kib();
        /* Both buffers were touched before; a whole copy of the 16 MiB message on the side
         * would raise the peak by 16384 KiB. Generous: the library's own buffers (a few MiB
         * across hosts). */
        if (before > 0 && after > 0)
            CHECK(after - before < 8192);

        /* A synchronous send completes once its message is matched: the probe took it, the
         * receive is non-blocking and waited for last. */
        OK(MPI_Mprobe(1, 3, MPI_COMM_WORLD, &m, &st));
        OK(MPI_Imrecv(a, 3 * MIB, MPI_BYTE, &m, &r[0]));
        CHECK(m == MPI_MESSAGE_NULL);
        OK(MPI_Wait(&r[0], &st));
        OK(MPI_Get_count(&st, MPI_BYTE, &count));
        CHECK(count == 3 * MIB && st.MPI_TAG == 3 && same(a, 3 * MIB, 3));

        /* Too small a buffer: MPI_ERR_TRUNCATE (how much of the buffer is written then is not
         * the standard's to say), and nothing after it is lost. */
        OK(MPI_Mprobe(1, 4, MPI_COMM_WORLD, &m, &st));
        memset(a, 0, 4 * MIB);
        int rc = MPI_Mrecv(a, MIB, MPI_BYTE, &m, &st);
        int cls;
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TRUNCATE);
        CHECK(a[MIB] == 0);

        /* Into a non-contiguous datatype: every other 8-byte block. */
        MPI_Datatype vec;
        OK(MPI_Type_vector(2 * MIB / 8, 1, 2, MPI_DOUBLE, &vec));
        OK(MPI_Type_commit(&vec));
        OK(MPI_Mprobe(1, 5, MPI_COMM_WORLD, &m, &st));
        memset(b, 0, 4 * MIB);
        OK(MPI_Mrecv(b, 1, vec, &m, &st));
        fill(a, 2 * MIB, 5);
        for (size_t k = 0; k < 2 * MIB / 8; k++) {
            CHECK(memcmp(b + 16 * k, a + 8 * k, 8) == 0);
            CHECK(((uint64_t *)b)[2 * k + 1] == 0);
        }
        /* The same again by MPI_Imrecv. */
        int flag = 0;
        while (!flag)
            OK(MPI_Improbe(1, 6, MPI_COMM_WORLD, &flag, &m, &st));
        memset(b, 0, 4 * MIB);
        OK(MPI_Imrecv(b, 1, vec, &m, &r[0]));
        OK(MPI_Wait(&r[0], &st));
        OK(MPI_Get_elements(&st, MPI_DOUBLE, &count));
        CHECK(count == MIB / 8);
        fill(a, MIB, 6);
        for (size_t k = 0; k < MIB / 8; k++)
            CHECK(memcmp(b + 16 * k, a + 8 * k, 8) == 0);
        OK(MPI_Type_free(&vec));

        /* Two held at once, received in the other order, waited for together. */
        OK(MPI_Mprobe(1, 7, MPI_COMM_WORLD, &m, &st));
        OK(MPI_Mprobe(1, 8, MPI_COMM_WORLD, &m2, &st));
        memset(a, 0, 4 * MIB);
        memset(b, 0, 4 * MIB);
        OK(MPI_Imrecv(b, MIB, MPI_BYTE, &m2, &r[1]));
        OK(MPI_Imrecv(a, MIB, MPI_BYTE, &m, &r[0]));
        MPI_Status sts[2];
        OK(MPI_Waitall(2, r, sts));
        CHECK(sts[0].MPI_TAG == 7 && sts[1].MPI_TAG == 8);
        CHECK(same(a, MIB, 7) && same(b, MIB, 8));

        /* Into a larger buffer: the count says how much came. */
        OK(MPI_Mprobe(1, 9, MPI_COMM_WORLD, &m, &st));
        OK(MPI_Mrecv(a, 4 * MIB, MPI_BYTE, &m, &st));
        OK(MPI_Get_count(&st, MPI_BYTE, &count));
        CHECK(count == 3 * MIB && same(a, 3 * MIB, 9));

        if (size > 2) {
            OK(MPI_Mprobe(MPI_ANY_SOURCE, 50, MPI_COMM_WORLD, &m, &st));
            CHECK(st.MPI_SOURCE == 2);
            OK(MPI_Mrecv(a, 2 * MIB, MPI_BYTE, &m, &st));
            CHECK(same(a, 2 * MIB, 50));
        }
        free(a);
        free(b);
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));
    pass("mprobe_large");
    return 0;
}
