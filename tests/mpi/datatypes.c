/* Derived datatypes (MPI-3.1 chapter 4): every constructor's size, bounds and typemap, checked
 * by sending with the derived type and receiving contiguous data (and back); Pack and Unpack;
 * envelope and contents; predefined pair types. */
#include "check.h"
#include <stddef.h>
#include <string.h>

/* Sends count elements of t from src to the other rank of the pair and receives n ints. */
static void roundtrip(MPI_Datatype t, void *src, int count, int *got, int n) {
    int rank = world_rank();
    if (rank == 0) {
        OK(MPI_Send(src, count, t, 1, 0, MPI_COMM_WORLD));
    } else if (rank == 1) {
        MPI_Status st;
        int c;
        OK(MPI_Recv(got, n, MPI_INT, 0, 0, MPI_COMM_WORLD, &st));
        OK(MPI_Get_count(&st, MPI_INT, &c));
        CHECK(c == n);
    }
    OK(MPI_Bcast(got, n, MPI_INT, 1, MPI_COMM_WORLD));
}

/* A resized type with a negative extent (MPI-3.1 4.1.7): its copies run downwards, so the
 * bounds of a type built from it come from its last copy (lb) and its first (ub). */
static void negative_extent(void) {
    MPI_Datatype t4, r, c, v;
    MPI_Aint lb, ext;
    OK(MPI_Type_contiguous(4, MPI_BYTE, &t4));
    OK(MPI_Type_create_resized(t4, 6, -9, &r));
    OK(MPI_Type_get_extent(r, &lb, &ext));
    CHECK(lb == 6 && ext == -9);
    /* Copies at 0, -9, -18: lower bounds 6, -3, -12; upper bounds -3, -12, -21. */
    OK(MPI_Type_contiguous(3, r, &c));
    OK(MPI_Type_get_extent(c, &lb, &ext));
    CHECK(lb == -12 && ext == 9);
    /* Blocks of 4 copies, 5 copies apart: copies 0..3, 5..8, 10..13 at -9 bytes each, so the
     * lowest lower bound is 6 - 13 * 9 = -111 and the highest upper bound -3. */
    OK(MPI_Type_vector(3, 4, 5, r, &v));
    OK(MPI_Type_get_extent(v, &lb, &ext));
    CHECK(lb == -111 && ext == 108);
    MPI_Type_free(&t4);
    MPI_Type_free(&r);
    MPI_Type_free(&c);
    MPI_Type_free(&v);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    CHECK(world_size() >= 2);
    negative_extent();
    int a[64];
    for (int i = 0; i < 64; i++)
        a[i] = i;
    int got[64];
    int size;
    MPI_Aint lb, ext, tlb, text;

    MPI_Datatype contig, vec, hvec, idx, hidx, blk, st, sub, res, dup;
    OK(MPI_Type_contiguous(3, MPI_INT, &contig));
    OK(MPI_Type_commit(&contig));
    OK(MPI_Type_size(contig, &size));
    CHECK(size == 12);
    roundtrip(contig, a, 2, got, 6);
    CHECK(got[5] == 5);

    /* vector: 3 blocks of 2, stride 5: 0 1 5 6 10 11 */
    OK(MPI_Type_vector(3, 2, 5, MPI_INT, &vec));
    OK(MPI_Type_commit(&vec));
    OK(MPI_Type_size(vec, &size));
    OK(MPI_Type_get_extent(vec, &lb, &ext));
    CHECK(size == 24 && lb == 0 && ext == 12 * 4);
    roundtrip(vec, a, 1, got, 6);
    CHECK(got[0] == 0 && got[1] == 1 && got[2] == 5 && got[3] == 6 && got[4] == 10 && got[5] == 11);
    /* Two vectors in a row start at the extent: 12 13 17 18 22 23. */
    roundtrip(vec, a, 2, got, 12);
    CHECK(got[6] == 12 && got[11] == 23);

    OK(MPI_Type_create_hvector(2, 1, 16, MPI_INT, &hvec));
    OK(MPI_Type_commit(&hvec));
    roundtrip(hvec, a, 1, got, 2);
    CHECK(got[0] == 0 && got[1] == 4);

    int bl[3] = {1, 2, 1}, dp[3] = {10, 3, 0};
    OK(MPI_Type_indexed(3, bl, dp, MPI_INT, &idx));
    OK(MPI_Type_commit(&idx));
    OK(MPI_Type_get_extent(idx, &lb, &ext));
    OK(MPI_Type_get_true_extent(idx, &tlb, &text));
    CHECK(lb == 0 && ext == 44 && tlb == 0 && text == 44);
    roundtrip(idx, a, 1, got, 4);
    CHECK(got[0] == 10 && got[1] == 3 && got[2] == 4 && got[3] == 0);

    MPI_Aint hd[2] = {8, 0};
    int hbl[2] = {1, 1};
    OK(MPI_Type_create_hindexed(2, hbl, hd, MPI_INT, &hidx));
    OK(MPI_Type_commit(&hidx));
    roundtrip(hidx, a, 1, got, 2);
    CHECK(got[0] == 2 && got[1] == 0);

    int bd[3] = {6, 2, 9};
    OK(MPI_Type_create_indexed_block(3, 2, bd, MPI_INT, &blk));
    OK(MPI_Type_commit(&blk));
    roundtrip(blk, a, 1, got, 6);
    CHECK(got[0] == 6 && got[1] == 7 && got[2] == 2 && got[4] == 9 && got[5] == 10);

    /* Hindexed block: blocks of 2 ints at byte displacements; the constructor is what
     * get_envelope reports (MPI-3.1 4.1.13), with its arguments back from get_contents. */
    MPI_Datatype hblk;
    MPI_Aint hbd[3] = {24, 8, 36};
    OK(MPI_Type_create_hindexed_block(3, 2, hbd, MPI_INT, &hblk));
    OK(MPI_Type_commit(&hblk));
    roundtrip(hblk, a, 1, got, 6);
    CHECK(got[0] == 6 && got[1] == 7 && got[2] == 2 && got[3] == 3 && got[4] == 9 && got[5] == 10);
    {
        int ni, na, nd, comb, hi[2];
        MPI_Aint ha[3];
        MPI_Datatype ht;
        OK(MPI_Type_get_envelope(hblk, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_HINDEXED_BLOCK && ni == 2 && na == 3 && nd == 1);
        OK(MPI_Type_get_contents(hblk, 2, 3, 1, hi, ha, &ht));
        CHECK(hi[0] == 3 && hi[1] == 2 && ha[0] == 24 && ha[1] == 8 && ha[2] == 36 && ht == MPI_INT);
        OK(MPI_Type_get_envelope(hidx, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_HINDEXED);
    }
    OK(MPI_Type_free(&hblk));

    /* A struct of (char, double, int), sent as itself. */
    struct s { char c; double d; int i; } sv[2] = {{'a', 1.5, 7}, {'b', 2.5, 8}}, sr[2];
    int sbl[3] = {1, 1, 1};
    MPI_Aint sd[3] = {offsetof(struct s, c), offsetof(struct s, d), offsetof(struct s, i)};
    MPI_Datatype sty[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
    OK(MPI_Type_create_struct(3, sbl, sd, sty, &st));
    OK(MPI_Type_commit(&st));
    OK(MPI_Type_size(st, &size));
    OK(MPI_Type_get_extent(st, &lb, &ext));
    CHECK(size == 1 + 8 + 4 && lb == 0 && ext == (MPI_Aint)sizeof(struct s));
    memset(sr, 0, sizeof sr);
    if (world_rank() == 0)
        OK(MPI_Send(sv, 2, st, 1, 1, MPI_COMM_WORLD));
    else if (world_rank() == 1) {
        OK(MPI_Recv(sr, 2, st, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(sr[1].c == 'b' && sr[1].d == 2.5 && sr[1].i == 8 && sr[0].i == 7);
    }

    /* A struct of seven structs of three (unsigned) chars: nothing is padded, since every member aligns
     * to 1 (MPI-3.1 4.1.6: the extent rounds up to the members' alignment, not a word's). */
    {
        MPI_Datatype c3, c3x7, c3t[3] = {MPI_CHAR, MPI_UNSIGNED_CHAR, MPI_CHAR};
        int c3bl[3] = {1, 1, 1}, seven = 7;
        MPI_Aint c3d[3] = {0, 1, 2}, zero = 0;
        OK(MPI_Type_create_struct(3, c3bl, c3d, c3t, &c3));
        OK(MPI_Type_create_struct(1, &seven, &zero, &c3, &c3x7));
        OK(MPI_Type_get_extent(c3, &lb, &ext));
        CHECK(lb == 0 && ext == 3);
        OK(MPI_Type_get_extent(c3x7, &lb, &ext));
        CHECK(lb == 0 && ext == 21);
        OK(MPI_Type_free(&c3x7));
        OK(MPI_Type_free(&c3));
    }

    /* A 2x3 block at (1,2) of a 4x6 C array. */
    int sizes[2] = {4, 6}, subs[2] = {2, 3}, starts[2] = {1, 2};
    OK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &sub));
    OK(MPI_Type_commit(&sub));
    OK(MPI_Type_get_extent(sub, &lb, &ext));
    CHECK(lb == 0 && ext == 24 * 4);
    roundtrip(sub, a, 1, got, 6);
    CHECK(got[0] == 8 && got[1] == 9 && got[2] == 10 && got[3] == 14 && got[5] == 16);
    MPI_Datatype subf;
    OK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_INT, &subf));
    OK(MPI_Type_commit(&subf));
    /* Fortran order: dimension 0 is fastest: elements (1..2, 2..4) at 1 + 2*4 .. */
    roundtrip(subf, a, 1, got, 6);
    CHECK(got[0] == 9 && got[1] == 10 && got[2] == 13 && got[3] == 14 && got[4] == 17 && got[5] == 18);

    /* Resized: an int with extent 8 picks every other int. */
    OK(MPI_Type_create_resized(MPI_INT, 0, 8, &res));
    OK(MPI_Type_commit(&res));
    OK(MPI_Type_get_extent(res, &lb, &ext));
    CHECK(lb == 0 && ext == 8);
    roundtrip(res, a, 4, got, 4);
    CHECK(got[0] == 0 && got[1] == 2 && got[3] == 6);

    OK(MPI_Type_dup(vec, &dup));
    OK(MPI_Type_commit(&dup));
    int ni, na, nd, comb;
    OK(MPI_Type_get_envelope(dup, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_DUP && nd == 1);
    OK(MPI_Type_get_envelope(vec, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_VECTOR && ni == 3 && na == 0 && nd == 1);
    int ints[3];
    MPI_Aint addrs[1];
    MPI_Datatype types[1];
    OK(MPI_Type_get_contents(vec, 3, 0, 1, ints, addrs, types));
    CHECK(ints[0] == 3 && ints[1] == 2 && ints[2] == 5 && types[0] == MPI_INT);
    OK(MPI_Type_get_envelope(MPI_INT, &ni, &na, &nd, &comb));
    CHECK(comb == MPI_COMBINER_NAMED);

    /* Names. */
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    OK(MPI_Type_get_name(MPI_DOUBLE, name, &len));
    CHECK(strcmp(name, "MPI_DOUBLE") == 0);
    OK(MPI_Type_set_name(vec, "pairs"));
    OK(MPI_Type_get_name(vec, name, &len));
    CHECK(strcmp(name, "pairs") == 0 && len == 5);

    /* Pack and Unpack. */
    char packed[256];
    int pos = 0, psize;
    OK(MPI_Pack_size(1, vec, MPI_COMM_WORLD, &psize));
    CHECK(psize >= 24);
    OK(MPI_Pack(a, 1, vec, packed, sizeof packed, &pos, MPI_COMM_WORLD));
    double pi = 3.25;
    OK(MPI_Pack(&pi, 1, MPI_DOUBLE, packed, sizeof packed, &pos, MPI_COMM_WORLD));
    int un[6];
    double pd;
    int upos = 0;
    OK(MPI_Unpack(packed, pos, &upos, un, 6, MPI_INT, MPI_COMM_WORLD));
    OK(MPI_Unpack(packed, pos, &upos, &pd, 1, MPI_DOUBLE, MPI_COMM_WORLD));
    CHECK(un[2] == 5 && un[5] == 11 && pd == 3.25 && upos == pos);
    if (world_rank() == 0)
        OK(MPI_Send(packed, pos, MPI_PACKED, 1, 2, MPI_COMM_WORLD));
    else if (world_rank() == 1) {
        char in[256];
        int c;
        MPI_Status s2;
        OK(MPI_Recv(in, 256, MPI_PACKED, 0, 2, MPI_COMM_WORLD, &s2));
        OK(MPI_Get_count(&s2, MPI_PACKED, &c));
        CHECK(c == pos);
        upos = 0;
        /* The vector spans 12 ints; the gaps stay untouched. */
        int v12[12];
        for (int i = 0; i < 12; i++)
            v12[i] = -1;
        OK(MPI_Unpack(in, c, &upos, v12, 1, vec, MPI_COMM_WORLD));
        CHECK(v12[0] == 0 && v12[1] == 1 && v12[2] == -1 && v12[5] == 5 && v12[11] == 11);
    }

    /* Pair types: sizes and MINLOC / MAXLOC. */
    OK(MPI_Type_size(MPI_DOUBLE_INT, &size));
    CHECK(size == 12);
    OK(MPI_Type_size(MPI_2INT, &size));
    CHECK(size == 8);
    struct { double v; int i; } in = {world_rank() % 3, world_rank()}, out;
    OK(MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
    CHECK(out.v == (world_size() >= 3 ? 2.0 : 1.0) && out.i == (world_size() >= 3 ? 2 : 1));
    OK(MPI_Allreduce(&in, &out, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
    CHECK(out.v == 0.0 && out.i == 0);

    /* Get_elements counts basic elements of a partial derived type. */
    if (world_rank() == 0)
        OK(MPI_Send(a, 5, MPI_INT, 1, 3, MPI_COMM_WORLD));
    else if (world_rank() == 1) {
        MPI_Status s3;
        int c, e;
        OK(MPI_Recv(got, 2, contig, 0, 3, MPI_COMM_WORLD, &s3));
        OK(MPI_Get_count(&s3, contig, &c));
        OK(MPI_Get_elements(&s3, contig, &e));
        CHECK(c == MPI_UNDEFINED && e == 5);
    }

    MPI_Datatype all[] = {contig, vec, hvec, idx, hidx, blk, st, sub, subf, res, dup};
    for (int i = 0; i < 11; i++)
        OK(MPI_Type_free(&all[i]));
    CHECK(all[0] == MPI_DATATYPE_NULL);
    MPI_Aint x1, x2;
    OK(MPI_Get_address(&a[0], &x1));
    OK(MPI_Get_address(&a[5], &x2));
    CHECK(MPI_Aint_diff(x2, x1) == 20 && MPI_Aint_add(x1, 20) == x2);
    {
        /* MPI_Type_get_contents returns new handles for derived components (MPI 3.1, 4.1.13):
         * valid after the program freed the one it built with, and freeing them leaves the
         * type built from them intact. */
        MPI_Datatype c3, v;
        OK(MPI_Type_contiguous(3, MPI_INT, &c3));
        OK(MPI_Type_vector(2, 1, 4, c3, &v));
        OK(MPI_Type_commit(&v));
        OK(MPI_Type_free(&c3));
        int ni, na, nd, comb;
        OK(MPI_Type_get_envelope(v, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_VECTOR && ni == 3 && na == 0 && nd == 1);
        int ints[3];
        MPI_Aint aints[1];
        MPI_Datatype parts[1];
        OK(MPI_Type_get_contents(v, ni, na, nd, ints, aints, parts));
        CHECK(ints[0] == 2 && ints[1] == 1 && ints[2] == 4);
        int sz;
        OK(MPI_Type_size(parts[0], &sz));
        CHECK(sz == 3 * (int)sizeof(int));
        OK(MPI_Type_get_envelope(parts[0], &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_CONTIGUOUS);
        OK(MPI_Type_free(&parts[0]));
        OK(MPI_Type_size(v, &sz));
        CHECK(sz == 6 * (int)sizeof(int));
        OK(MPI_Type_get_contents(v, 3, 0, 1, ints, aints, parts));
        OK(MPI_Type_free(&parts[0]));
        OK(MPI_Type_free(&v));
    }
    pass("datatypes");
    return 0;
}
