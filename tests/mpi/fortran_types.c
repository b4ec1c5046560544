/* The Fortran named datatypes used from C (MPI-3.1 3.2.2, 5.9.2, 17.2.5): sizes and names,
 * point-to-point round trips, reductions (sums, complex products, logical operators, MAXLOC on
 * the pair types), MPI_Type_match_size (17.1.9) and MPI_Type_create_f90_integer/real/complex
 * (17.2.5); and a status handed to Fortran and back
 * (MPI_Status_c2f and MPI_Status_f2c, 17.2.5). */
#include "check.h"
#include <string.h>

enum kind { INT, FLT };

/* A Fortran type as C sees it: `comps` components of `width` bytes each, integers or IEEE. */
struct ftype {
    MPI_Datatype t;
    const char *name;
    int size;
    enum kind kind;
    int width;
    int comps;
};

/* Stores value v in component c of element e of buf, in the C type that matches. */
static void put(const struct ftype *f, void *buf, int e, int c, int v) {
    char *p = (char *)buf + (size_t)(e * f->comps + c) * f->width;
    if (f->kind == FLT) {
        if (f->width == 4) {
            float x = v + 0.25f;
            memcpy(p, &x, 4);
        } else {
            double x = v + 0.125;
            memcpy(p, &x, 8);
        }
    } else if (f->t == MPI_LOGICAL) {
        int32_t x = v;
        memcpy(p, &x, 4);
    } else if (f->width == 1) {
        int8_t x = (int8_t)(v % 100);
        memcpy(p, &x, 1);
    } else if (f->width == 2) {
        int16_t x = (int16_t)(v * 100);
        memcpy(p, &x, 2);
    } else if (f->width == 4) {
        int32_t x = v * 100000;
        memcpy(p, &x, 4);
    } else {
        int64_t x = (int64_t)v << 40;
        memcpy(p, &x, 8);
    }
}

static int logical(int v) { return v != 0; }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), n = world_size();
    const struct ftype types[] = {
        {MPI_INTEGER, "MPI_INTEGER", 4, INT, 4, 1},
        {MPI_REAL, "MPI_REAL", 4, FLT, 4, 1},
        {MPI_DOUBLE_PRECISION, "MPI_DOUBLE_PRECISION", 8, FLT, 8, 1},
        {MPI_COMPLEX, "MPI_COMPLEX", 8, FLT, 4, 2},
        {MPI_DOUBLE_COMPLEX, "MPI_DOUBLE_COMPLEX", 16, FLT, 8, 2},
        {MPI_LOGICAL, "MPI_LOGICAL", 4, INT, 4, 1},
        {MPI_CHARACTER, "MPI_CHARACTER", 1, INT, 1, 1},
        {MPI_INTEGER1, "MPI_INTEGER1", 1, INT, 1, 1},
        {MPI_INTEGER2, "MPI_INTEGER2", 2, INT, 2, 1},
        {MPI_INTEGER4, "MPI_INTEGER4", 4, INT, 4, 1},
        {MPI_INTEGER8, "MPI_INTEGER8", 8, INT, 8, 1},
        {MPI_REAL4, "MPI_REAL4", 4, FLT, 4, 1},
        {MPI_REAL8, "MPI_REAL8", 8, FLT, 8, 1},
        {MPI_COMPLEX8, "MPI_COMPLEX8", 8, FLT, 4, 2},
        {MPI_COMPLEX16, "MPI_COMPLEX16", 16, FLT, 8, 2},
        {MPI_2INTEGER, "MPI_2INTEGER", 8, INT, 4, 2},
        {MPI_2REAL, "MPI_2REAL", 8, FLT, 4, 2},
        {MPI_2DOUBLE_PRECISION, "MPI_2DOUBLE_PRECISION", 16, FLT, 8, 2},
    };
    const int ntypes = (int)(sizeof types / sizeof types[0]);

    /* Sizes, extents and names; each a named predefined type. */
    for (int i = 0; i < ntypes; i++) {
        const struct ftype *f = &types[i];
        int size = -1, len = -1, ni, na, nd, comb;
        MPI_Aint lb = -1, ext = -1;
        char name[MPI_MAX_OBJECT_NAME];
        CHECK(f->t != MPI_DATATYPE_NULL);
        CHECK(f->width * f->comps == f->size);
        OK(MPI_Type_size(f->t, &size));
        CHECK(size == f->size);
        OK(MPI_Type_get_extent(f->t, &lb, &ext));
        CHECK(lb == 0 && ext == f->size);
        OK(MPI_Type_get_name(f->t, name, &len));
        CHECK(strcmp(name, f->name) == 0 && len == (int)strlen(f->name));
        OK(MPI_Type_get_envelope(f->t, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_NAMED);
    }

    /* Five elements of each type from rank 0 to rank 1 and back. */
    if (n >= 2 && rank < 2) {
        enum { COUNT = 5 };
        for (int i = 0; i < ntypes; i++) {
            const struct ftype *f = &types[i];
            unsigned char src[COUNT * 16], got[COUNT * 16 + 16];
            MPI_Status st;
            int c = -1;
            for (int e = 0; e < COUNT; e++)
                for (int k = 0; k < f->comps; k++)
                    put(f, src, e, k, f == &types[5] ? (e + k) % 2 : i * 10 + e * 3 + k + 1);
            memset(got, 0xee, sizeof got);
            if (rank == 0) {
                OK(MPI_Send(src, COUNT, f->t, 1, i, MPI_COMM_WORLD));
                OK(MPI_Recv(got, COUNT + 1, f->t, 1, i, MPI_COMM_WORLD, &st));
            } else {
                OK(MPI_Recv(got, COUNT + 1, f->t, 0, i, MPI_COMM_WORLD, &st));
                OK(MPI_Send(got, COUNT, f->t, 0, i, MPI_COMM_WORLD));
            }
            OK(MPI_Get_count(&st, f->t, &c));
            CHECK(c == COUNT);
            CHECK(memcmp(got, src, (size_t)COUNT * f->size) == 0);
            /* Nothing past the message was written. */
            CHECK(got[COUNT * f->size] == 0xee && got[COUNT * f->size + f->size - 1] == 0xee);
        }
    }

    /* Sums over INTEGER, REAL, DOUBLE PRECISION, COMPLEX, DOUBLE COMPLEX and INTEGER8. */
    {
        int32_t ii[3], io[3];
        float ri[3], ro[3];
        double di[3], dout[3];
        int64_t li[2], lo[2];
        for (int k = 0; k < 3; k++) {
            ii[k] = k * 1000 + rank + 1;
            ri[k] = (float)(k * 8 + rank) + 0.5f;
            di[k] = (k - 1) * 1e9 + rank * 0.25;
        }
        li[0] = ((int64_t)(rank + 1) << 40) + rank;
        li[1] = -((int64_t)3 << 50);
        OK(MPI_Allreduce(ii, io, 3, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD));
        OK(MPI_Allreduce(ri, ro, 3, MPI_REAL, MPI_SUM, MPI_COMM_WORLD));
        OK(MPI_Allreduce(di, dout, 3, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD));
        OK(MPI_Allreduce(li, lo, 2, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD));
        int tri = n * (n + 1) / 2, below = n * (n - 1) / 2;
        for (int k = 0; k < 3; k++) {
            CHECK(io[k] == n * k * 1000 + tri);
            CHECK(ro[k] == (float)(n * k * 8 + below) + 0.5f * n);
            CHECK(dout[k] == n * (k - 1) * 1e9 + below * 0.25);
        }
        CHECK(lo[0] == ((int64_t)tri << 40) + below && lo[1] == -((int64_t)3 * n << 50));

        /* Complex: a sum adds parts; a product is the complex product, (1+i)^n, which a
         * componentwise product (1, 1) would not give. */
        float ci[4] = {rank + 1.0f, -2.0f * rank, 1.0f, 1.0f}, co[4];
        OK(MPI_Allreduce(ci, co, 1, MPI_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
        CHECK(co[0] == (float)tri && co[1] == -2.0f * below);
        OK(MPI_Allreduce(ci + 2, co + 2, 1, MPI_COMPLEX, MPI_PROD, MPI_COMM_WORLD));
        double zi[2] = {1.0, 1.0}, zo[2];
        OK(MPI_Allreduce(zi, zo, 1, MPI_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD));
        double pre = 1, pim = 0; /* (1+i)^n, exact: its parts are 0 or powers of 2 */
        for (int k = 0; k < n; k++) {
            double r = pre - pim;
            pim = pre + pim;
            pre = r;
        }
        CHECK(co[2] == (float)pre && co[3] == (float)pim);
        CHECK(zo[0] == pre && zo[1] == pim);
        OK(MPI_Allreduce(zi, zo, 1, MPI_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD));
        CHECK(zo[0] == n && zo[1] == n);
    }

    /* Logical operators on LOGICAL (0 is false, nonzero true). */
    {
        int32_t in[4] = {1, rank == 0, 0, rank == n - 1}, land[4], lor[4];
        OK(MPI_Allreduce(in, land, 4, MPI_LOGICAL, MPI_LAND, MPI_COMM_WORLD));
        OK(MPI_Allreduce(in, lor, 4, MPI_LOGICAL, MPI_LOR, MPI_COMM_WORLD));
        CHECK(logical(land[0]) && logical(land[1]) == (n == 1) && !logical(land[2]) &&
              logical(land[3]) == (n == 1));
        CHECK(logical(lor[0]) && logical(lor[1]) && !logical(lor[2]) && logical(lor[3]));
    }

    /* MAXLOC and MINLOC on pairs (value, index) of one type; a tie takes the smaller index. */
    {
        int32_t ip[6] = {rank % 2, rank, -rank, rank, rank / 2, rank}, io[6];
        double dp[6] = {rank % 2 + 0.5, rank, -rank - 0.5, rank, rank / 2, rank}, dout[6];
        float fp[6] = {rank % 2 + 0.5f, rank, -rank - 0.5f, rank, rank / 2, rank}, fo[6];
        OK(MPI_Allreduce(ip, io, 3, MPI_2INTEGER, MPI_MAXLOC, MPI_COMM_WORLD));
        OK(MPI_Allreduce(dp, dout, 3, MPI_2DOUBLE_PRECISION, MPI_MAXLOC, MPI_COMM_WORLD));
        OK(MPI_Allreduce(fp, fo, 3, MPI_2REAL, MPI_MAXLOC, MPI_COMM_WORLD));
        int m0 = n >= 2 ? 1 : 0, m2 = (n - 1) / 2;
        CHECK(io[0] == m0 && io[1] == m0 && io[2] == 0 && io[3] == 0);
        CHECK(io[4] == m2 && io[5] == 2 * m2);
        CHECK(dout[0] == m0 + 0.5 && dout[1] == m0 && dout[2] == -0.5 && dout[3] == 0);
        CHECK(dout[4] == m2 && dout[5] == 2 * m2);
        CHECK(fo[0] == m0 + 0.5f && fo[1] == m0 && fo[2] == -0.5f && fo[3] == 0);
        CHECK(fo[4] == m2 && fo[5] == 2 * m2);
        OK(MPI_Allreduce(ip, io, 3, MPI_2INTEGER, MPI_MINLOC, MPI_COMM_WORLD));
        CHECK(io[0] == 0 && io[1] == 0 && io[2] == -(n - 1) && io[3] == n - 1);
        CHECK(io[4] == 0 && io[5] == 0);
        OK(MPI_Allreduce(dp, dout, 3, MPI_2DOUBLE_PRECISION, MPI_MINLOC, MPI_COMM_WORLD));
        CHECK(dout[0] == 0.5 && dout[1] == 0 && dout[2] == -(n - 1) - 0.5 && dout[3] == n - 1);
    }

    /* MPI_Type_match_size: a predefined named type of the asked class and size, usable in a
     * reduction with the C type of that size. */
    {
        MPI_Datatype t;
        int size, ni, na, nd, comb;
        const int classes[6] = {MPI_TYPECLASS_INTEGER, MPI_TYPECLASS_INTEGER, MPI_TYPECLASS_REAL,
                                MPI_TYPECLASS_REAL, MPI_TYPECLASS_COMPLEX, MPI_TYPECLASS_COMPLEX};
        const int sizes[6] = {4, 8, 4, 8, 8, 16};
        MPI_Datatype got[6];
        for (int i = 0; i < 6; i++) {
            t = MPI_DATATYPE_NULL;
            OK(MPI_Type_match_size(classes[i], sizes[i], &t));
            CHECK(t != MPI_DATATYPE_NULL);
            OK(MPI_Type_size(t, &size));
            CHECK(size == sizes[i]);
            OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
            CHECK(comb == MPI_COMBINER_NAMED);
            got[i] = t;
        }
        int32_t i4[2] = {rank + 1, -7}, o4[2];
        int64_t i8[2] = {(int64_t)(rank + 1) << 36, -7}, o8[2];
        float r4[2] = {rank + 0.5f, 2.0f}, f4[2];
        double r8[2] = {rank + 0.25, 1e12}, f8[2];
        float c8[4] = {rank + 1.0f, 0.5f, -1.0f, rank}, g8[4];
        double c16[4] = {rank + 1.0, 0.25, -1.0, rank}, g16[4];
        int tri = n * (n + 1) / 2, below = n * (n - 1) / 2;
        OK(MPI_Allreduce(i4, o4, 2, got[0], MPI_SUM, MPI_COMM_WORLD));
        CHECK(o4[0] == tri && o4[1] == -7 * n);
        OK(MPI_Allreduce(i8, o8, 2, got[1], MPI_SUM, MPI_COMM_WORLD));
        CHECK(o8[0] == (int64_t)tri << 36 && o8[1] == -7 * n);
        OK(MPI_Allreduce(r4, f4, 2, got[2], MPI_SUM, MPI_COMM_WORLD));
        CHECK(f4[0] == below + 0.5f * n && f4[1] == 2.0f * n);
        OK(MPI_Allreduce(r8, f8, 2, got[3], MPI_SUM, MPI_COMM_WORLD));
        CHECK(f8[0] == below + 0.25 * n && f8[1] == 1e12 * n);
        OK(MPI_Allreduce(c8, g8, 2, got[4], MPI_SUM, MPI_COMM_WORLD));
        CHECK(g8[0] == tri && g8[1] == 0.5f * n && g8[2] == -n && g8[3] == below);
        OK(MPI_Allreduce(c16, g16, 2, got[5], MPI_SUM, MPI_COMM_WORLD));
        CHECK(g16[0] == tri && g16[1] == 0.25 * n && g16[2] == -n && g16[3] == below);

        /* No REAL of 3 bytes: an error, returned since the handlers return errors (a call
         * with no handle reports on MPI_COMM_WORLD in MPI-3.1, MPI_COMM_SELF in MPI-4.0). */
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
        CHECK(MPI_Type_match_size(MPI_TYPECLASS_REAL, 3, &t) != MPI_SUCCESS);
        CHECK(MPI_Type_match_size(MPI_TYPECLASS_INTEGER, 3, &t) != MPI_SUCCESS);
    }
    {
        /* MPI_Type_create_f90_integer/real/complex (MPI-3.1 17.2.5): the type of
         * SELECTED_INT_KIND(r) and SELECTED_REAL_KIND(p, r) of the Fortran compiler, each a
         * predefined type whose envelope names its maker and whose contents are p and r. */
        MPI_Datatype t;
        int size, ni, na, nd, comb, ints[2];
        MPI_Aint addr[1];
        MPI_Datatype dts[1];
        OK(MPI_Type_create_f90_integer(9, &t));
        OK(MPI_Type_size(t, &size));
        CHECK(size == 4);
        OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_F90_INTEGER && ni == 1 && na == 0 && nd == 0);
        OK(MPI_Type_get_contents(t, 1, 0, 0, ints, addr, dts));
        CHECK(ints[0] == 9);
        int32_t i4[2] = {rank + 1, -3}, o4[2];
        OK(MPI_Allreduce(i4, o4, 2, t, MPI_SUM, MPI_COMM_WORLD));
        CHECK(o4[0] == n * (n + 1) / 2 && o4[1] == -3 * n);
        OK(MPI_Type_create_f90_integer(18, &t));
        OK(MPI_Type_size(t, &size));
        CHECK(size == 8);
        OK(MPI_Type_create_f90_real(6, MPI_UNDEFINED, &t));
        OK(MPI_Type_size(t, &size));
        CHECK(size == 4);
        OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_F90_REAL && ni == 2 && na == 0 && nd == 0);
        OK(MPI_Type_get_contents(t, 2, 0, 0, ints, addr, dts));
        CHECK(ints[0] == 6 && ints[1] == MPI_UNDEFINED);
        OK(MPI_Type_create_f90_real(15, 300, &t));
        OK(MPI_Type_size(t, &size));
        CHECK(size == 8);
        double r8[1] = {rank + 0.5}, f8[1];
        OK(MPI_Allreduce(r8, f8, 1, t, MPI_MAX, MPI_COMM_WORLD));
        CHECK(f8[0] == n - 0.5);
        OK(MPI_Type_create_f90_complex(MPI_UNDEFINED, 30, &t));
        OK(MPI_Type_size(t, &size));
        CHECK(size == 8);
        OK(MPI_Type_get_envelope(t, &ni, &na, &nd, &comb));
        CHECK(comb == MPI_COMBINER_F90_COMPLEX && ni == 2);
        OK(MPI_Type_create_f90_complex(12, MPI_UNDEFINED, &t));
        OK(MPI_Type_size(t, &size));
        CHECK(size == 16);
    }
    {
        /* A status to Fortran and back: source and tag at MPI_F_SOURCE and MPI_F_TAG, and the
         * count and cancellation as they were. */
        int me = world_rank(), peer = (me + 1) % world_size(), from = (me + world_size() - 1) % world_size();
        double out[3] = {1, 2, 3}, in[3];
        MPI_Status st, back;
        OK(MPI_Sendrecv(out, 3, MPI_DOUBLE, peer, 40 + me, in, 3, MPI_DOUBLE, from, MPI_ANY_TAG,
                        MPI_COMM_WORLD, &st));
        MPI_Fint f[MPI_F_STATUS_SIZE];
        OK(MPI_Status_c2f(&st, f));
        CHECK(f[MPI_F_SOURCE] == from && f[MPI_F_TAG] == 40 + from);
        OK(MPI_Status_f2c(f, &back));
        int count = -1, cancelled = -1;
        OK(MPI_Get_count(&back, MPI_DOUBLE, &count));
        OK(MPI_Test_cancelled(&back, &cancelled));
        CHECK(back.MPI_SOURCE == from && back.MPI_TAG == 40 + from && count == 3 && !cancelled);
    }
    pass("fortran_types");
    return 0;
}
