/* Canonical packing (MPI-3.1 4.3) in the "external32" representation (13.5.2): the packed
 * bytes are big-endian, byte-aligned, with external32's sizes (char 1, short 2, int 4, long 4,
 * long long 8, float 4, double 8: Table 13.2 gives MPI_LONG 4 bytes, even where a C long has 8)
 * and no padding between the members of a derived type; MPI_Pack_external_size gives the byte
 * count; the position advances by it; MPI_Unpack_external reads it all back; no other datarep
 * is valid. */
#include "check.h"
#include <stddef.h>
#include <string.h>

static const char *const X32 = "external32";

/* MPICH 4.0 (Debian 12's) dies with SIGILL packing, or sizing, a derived type made of more than
 * one basic type in external32 (a struct of int and double; even of short and int): those checks
 * run on other MPIs only. */
#if defined(MPICH_NUMVERSION) && MPICH_NUMVERSION < 40100000
#define MIXED_TYPES 0
#else
#define MIXED_TYPES 1
#endif

/* "external32" is the only valid datarep (MPI-3.1 4.3); MPICH takes any string as external32,
 * so the check that another one is refused runs on other MPIs only. */
#ifdef MPICH_NUMVERSION
#define DATAREP_CHECKED 0
#else
#define DATAREP_CHECKED 1
#endif

/* buf[at..] holds the n bytes of want. */
static void bytes_are(const unsigned char *buf, MPI_Aint at, const unsigned char *want, int n) {
    for (int i = 0; i < n; i++)
        CHECK(buf[at + i] == want[i]);
}

/* Packs count elements of t from src at *pos, checking the size first and the position after. */
static void pack(const void *src, int count, MPI_Datatype t, unsigned char *buf, MPI_Aint outsize,
                 MPI_Aint *pos, MPI_Aint want) {
    MPI_Aint size = -1, before = *pos;
    OK(MPI_Pack_external_size(X32, count, t, &size));
    CHECK(size == want);
    OK(MPI_Pack_external(X32, src, count, t, buf, outsize, pos));
    CHECK(*pos == before + want);
}

struct id {
    int i;
    double d;
};

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    unsigned char buf[512];
    memset(buf, 0xa5, sizeof buf);
    MPI_Aint pos = 3; /* external32 is byte-aligned: start at an odd offset */
    const MPI_Aint outsize = sizeof buf;

    const int ints[3] = {1, -2, 0x01020304};
    const double dbls[2] = {1.0, -2.5};
    const short shorts[2] = {0x0102, -1};
    const char chars[2] = {'A', 'B'};
    const long longs[2] = {0x11223344L, -3L};
    const long long ll = 0x0102030405060708LL;
    const float fl = 1.5f;
    const unsigned int un = 0xfedcba98u;

    MPI_Aint at_ints = pos;
    pack(ints, 3, MPI_INT, buf, outsize, &pos, 12);
    MPI_Aint at_dbls = pos;
    pack(dbls, 2, MPI_DOUBLE, buf, outsize, &pos, 16);
    MPI_Aint at_shorts = pos;
    pack(shorts, 2, MPI_SHORT, buf, outsize, &pos, 4);
    MPI_Aint at_chars = pos;
    pack(chars, 2, MPI_CHAR, buf, outsize, &pos, 2);
    MPI_Aint at_longs = pos;
    pack(longs, 2, MPI_LONG, buf, outsize, &pos, 8);
    MPI_Aint at_ll = pos;
    pack(&ll, 1, MPI_LONG_LONG, buf, outsize, &pos, 8);
    MPI_Aint at_fl = pos;
    pack(&fl, 1, MPI_FLOAT, buf, outsize, &pos, 4);
    MPI_Aint at_un = pos;
    pack(&un, 1, MPI_UNSIGNED, buf, outsize, &pos, 4);
    /* Nothing packed, nothing moves. */
    MPI_Aint at_none = pos;
    pack(ints, 0, MPI_INT, buf, outsize, &pos, 0);
    CHECK(pos == at_none);

    /* A vector of ints (0, 2, 4 of 0..5) packs as three ints. */
    int six[6] = {0, 1, 2, 3, 4, 5};
    MPI_Datatype vec, st;
    OK(MPI_Type_vector(3, 1, 2, MPI_INT, &vec));
    OK(MPI_Type_commit(&vec));
    MPI_Aint at_vec = pos;
    pack(six, 1, vec, buf, outsize, &pos, 12);

    /* A struct of an int at 0 and two at 8: 12 bytes each, with no gap, though 16 apart in
     * memory. */
    MPI_Datatype hs;
    int hbl[2] = {1, 2};
    MPI_Aint hdisp[2] = {0, 8};
    MPI_Datatype htypes[2] = {MPI_INT, MPI_INT};
    OK(MPI_Type_create_struct(2, hbl, hdisp, htypes, &hs));
    OK(MPI_Type_commit(&hs));
    const int eight[8] = {1, -1, 3, 4, 5, -1, 7, 8};
    MPI_Aint at_hs = pos;
    pack(eight, 2, hs, buf, outsize, &pos, 24);

    /* A struct of an int and a double: 12 bytes each, though 16 apart in memory. */
    int bl[2] = {1, 1};
    MPI_Aint disp[2] = {offsetof(struct id, i), offsetof(struct id, d)};
    MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE};
    OK(MPI_Type_create_struct(2, bl, disp, types, &st));
    OK(MPI_Type_commit(&st));
    struct id ids[2] = {{7, 0.5}, {-8, 3.0}};
    MPI_Aint at_st = pos;
    if (MIXED_TYPES)
        pack(ids, 2, st, buf, outsize, &pos, 24);
    const MPI_Aint end = pos;

    /* The bytes. */
    CHECK(buf[0] == 0xa5 && buf[2] == 0xa5 && buf[end] == 0xa5);
    {
        const unsigned char w[12] = {0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe, 1, 2, 3, 4};
        bytes_are(buf, at_ints, w, 12);
    }
    {
        const unsigned char w[16] = {0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0xc0, 0x04, 0, 0, 0, 0, 0, 0};
        bytes_are(buf, at_dbls, w, 16);
    }
    {
        const unsigned char w[6] = {1, 2, 0xff, 0xff, 'A', 'B'};
        bytes_are(buf, at_shorts, w, 4);
        bytes_are(buf, at_chars, w + 4, 2);
    }
    {
        const unsigned char w[8] = {0x11, 0x22, 0x33, 0x44, 0xff, 0xff, 0xff, 0xfd};
        bytes_are(buf, at_longs, w, 8);
    }
    {
        const unsigned char w[16] = {1, 2, 3, 4, 5, 6, 7, 8,
                                     0x3f, 0xc0, 0, 0, 0xfe, 0xdc, 0xba, 0x98};
        bytes_are(buf, at_ll, w, 8);
        bytes_are(buf, at_fl, w + 8, 4);
        bytes_are(buf, at_un, w + 12, 4);
    }
    {
        const unsigned char w[12] = {0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 4};
        bytes_are(buf, at_vec, w, 12);
    }
    {
        const unsigned char w[24] = {0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 4,
                                     0, 0, 0, 5, 0, 0, 0, 7, 0, 0, 0, 8};
        bytes_are(buf, at_hs, w, 24);
    }
    if (MIXED_TYPES) {
        const unsigned char w[24] = {0, 0, 0, 7, 0x3f, 0xe0, 0, 0, 0, 0, 0, 0,
                                     0xff, 0xff, 0xff, 0xf8, 0x40, 0x08, 0, 0, 0, 0, 0, 0};
        bytes_are(buf, at_st, w, 24);
    }

    /* Sizes of counts of derived types, and of a pair of the struct in one go. */
    MPI_Aint size;
    OK(MPI_Pack_external_size(X32, 5, vec, &size));
    CHECK(size == 60);
    OK(MPI_Pack_external_size(X32, 7, hs, &size));
    CHECK(size == 84);
    if (MIXED_TYPES) {
        OK(MPI_Pack_external_size(X32, 7, st, &size));
        CHECK(size == 84);
    }

    /* Unpack it all back, in order. */
    {
        int ri[3];
        double rd[2];
        short rs[2];
        char rc[2];
        long rl[2];
        long long rll;
        float rf;
        unsigned int ru;
        int r6[6] = {-1, -1, -1, -1, -1, -1};
        int r8[8] = {-9, -9, -9, -9, -9, -9, -9, -9};
        struct id rid[2];
        memset(rid, 0, sizeof rid);
        MPI_Aint in = 3;
        OK(MPI_Unpack_external(X32, buf, end, &in, ri, 3, MPI_INT));
        CHECK(in == at_dbls);
        OK(MPI_Unpack_external(X32, buf, end, &in, rd, 2, MPI_DOUBLE));
        OK(MPI_Unpack_external(X32, buf, end, &in, rs, 2, MPI_SHORT));
        OK(MPI_Unpack_external(X32, buf, end, &in, rc, 2, MPI_CHAR));
        CHECK(in == at_longs);
        OK(MPI_Unpack_external(X32, buf, end, &in, rl, 2, MPI_LONG));
        OK(MPI_Unpack_external(X32, buf, end, &in, &rll, 1, MPI_LONG_LONG));
        OK(MPI_Unpack_external(X32, buf, end, &in, &rf, 1, MPI_FLOAT));
        OK(MPI_Unpack_external(X32, buf, end, &in, &ru, 1, MPI_UNSIGNED));
        CHECK(in == at_vec);
        OK(MPI_Unpack_external(X32, buf, end, &in, r6, 1, vec));
        CHECK(in == at_hs);
        OK(MPI_Unpack_external(X32, buf, end, &in, r8, 2, hs));
        CHECK(in == at_st);
        if (MIXED_TYPES) {
            OK(MPI_Unpack_external(X32, buf, end, &in, rid, 2, st));
            CHECK(rid[0].i == 7 && rid[0].d == 0.5 && rid[1].i == -8 && rid[1].d == 3.0);
        }
        CHECK(in == end);
        CHECK(ri[0] == 1 && ri[1] == -2 && ri[2] == 0x01020304);
        CHECK(rd[0] == 1.0 && rd[1] == -2.5);
        CHECK(rs[0] == 0x0102 && rs[1] == -1 && rc[0] == 'A' && rc[1] == 'B');
        CHECK(rl[0] == 0x11223344L && rl[1] == -3L);
        CHECK(rll == ll && rf == 1.5f && ru == un);
        /* The vector's gaps are left alone. */
        CHECK(r6[0] == 0 && r6[1] == -1 && r6[2] == 2 && r6[3] == -1 && r6[4] == 4 && r6[5] == -1);
        CHECK(r8[0] == 1 && r8[1] == -9 && r8[2] == 3 && r8[3] == 4);
        CHECK(r8[4] == 5 && r8[5] == -9 && r8[6] == 7 && r8[7] == 8);
    }

    /* The vector's packed form unpacks as plain ints, and an int and a double into the
     * struct. */
    {
        int three[3];
        MPI_Aint in = at_vec;
        OK(MPI_Unpack_external(X32, buf, end, &in, three, 3, MPI_INT));
        CHECK(in == at_hs && three[0] == 0 && three[1] == 2 && three[2] == 4);
    }
    if (MIXED_TYPES) {
        const unsigned char w[12] = {0, 0, 0, 9, 0x40, 0x24, 0, 0, 0, 0, 0, 0}; /* 9, 10.0 */
        MPI_Aint in = 0;
        struct id one = {0, 0};
        OK(MPI_Unpack_external(X32, w, 12, &in, &one, 1, st));
        CHECK(in == 12 && one.i == 9 && one.d == 10.0);
    }

    /* external32 is for moving data between processes: rank 0's bytes, sent as bytes, unpack
     * on rank 1. */
    if (world_size() >= 2 && world_rank() < 2) {
        if (world_rank() == 0) {
            OK(MPI_Send(buf + at_dbls, 16, MPI_BYTE, 1, 0, MPI_COMM_WORLD));
        } else {
            unsigned char in[16];
            double got[2];
            MPI_Aint p = 0;
            OK(MPI_Recv(in, 16, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            OK(MPI_Unpack_external(X32, in, 16, &p, got, 2, MPI_DOUBLE));
            CHECK(p == 16 && got[0] == 1.0 && got[1] == -2.5);
        }
    }

    /* Another datarep is an error (returned: the handlers return errors; a call with no
     * handle reports on MPI_COMM_WORLD in MPI-3.1, on MPI_COMM_SELF in MPI-4.0). */
    if (DATAREP_CHECKED) {
        MPI_Aint p = 0, size;
        unsigned char out[16];
        int two[2] = {1, 2};
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
        CHECK(MPI_Pack_external_size("native", 2, MPI_INT, &size) != MPI_SUCCESS);
        CHECK(MPI_Pack_external("native", two, 2, MPI_INT, out, sizeof out, &p) != MPI_SUCCESS);
        p = 0;
        CHECK(MPI_Unpack_external("external64", buf + at_ints, 8, &p, two, 2, MPI_INT) !=
              MPI_SUCCESS);
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
        OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL));
    }

    OK(MPI_Type_free(&hs));
    OK(MPI_Type_free(&vec));
    OK(MPI_Type_free(&st));
    pass("pack_external");
    return 0;
}
