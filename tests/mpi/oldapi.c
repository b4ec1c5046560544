/* What old and careful programs ask of datatypes beyond building them:
 * - MPI-1's functions that MPI-3.0 removed and MPICH keeps (MPI_Type_struct, _hvector,
 *   _hindexed, MPI_Address, MPI_Type_extent, _lb, _ub, MPI_Errhandler_create, _set, _get) do what
 *   their replacements (MPI-3.1 17.2) do;
 * - MPI_Type_get_true_extent_x (MPI-3.0) answers as MPI_Type_get_true_extent;
 * - every predefined datatype handle has its name (MPI-3.1 6.8), optional ones too, and one
 *   handle with two names (MPI_C_COMPLEX, MPI_LONG_LONG_INT) gives one of them;
 * - MPI_Type_match_size finds a real of C's long double size;
 * - MPI_Type_dup whose attribute copy callback fails fails, with no new type left. */
#include "check.h"
#include <string.h>

static int called;
static int last_code;

static void handler(MPI_Comm *comm, int *code, ...) {
    (void)comm;
    called++;
    last_code = *code;
}

static int failing_copy(MPI_Datatype t, int keyval, void *extra, void *in, void *out, int *flag) {
    (void)t, (void)keyval, (void)extra, (void)in, (void)out;
    *flag = 0;
    return MPI_ERR_OTHER;
}

/* Whether `name` is one of the names in the NULL-terminated list. */
static int one_of(const char *name, const char *const *names) {
    for (; *names; names++)
        if (strcmp(name, *names) == 0)
            return 1;
    return 0;
}

static void named(MPI_Datatype t, const char *const *names) {
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    OK(MPI_Type_get_name(t, name, &len));
    if (!one_of(name, names))
        fprintf(stderr, "name %s, expected %s\n", name, names[0]);
    CHECK(one_of(name, names));
    CHECK(len == (int)strlen(name));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = world_rank(), n = world_size();

    /* A struct {int; double} laid out by MPI_Address and MPI_Type_struct, against
     * MPI_Get_address and MPI_Type_create_struct. */
    struct {
        int i;
        double d;
    } s[2];
    MPI_Aint base, a1, a2, g1, g2;
    OK(MPI_Address(&s[0], &base));
    OK(MPI_Address(&s[0].i, &a1));
    OK(MPI_Address(&s[0].d, &a2));
    OK(MPI_Get_address(&s[0].i, &g1));
    OK(MPI_Get_address(&s[0].d, &g2));
    CHECK(a1 == g1 && a2 == g2);
    int blocks[2] = {1, 1};
    MPI_Aint disps[2] = {a1 - base, a2 - base};
    MPI_Datatype types[2] = {MPI_INT, MPI_DOUBLE}, old_s, new_s;
    OK(MPI_Type_struct(2, blocks, disps, types, &old_s));
    OK(MPI_Type_create_struct(2, blocks, disps, types, &new_s));
    MPI_Aint lb, ext, lb2, ext2, ub;
    int size, size2;
    OK(MPI_Type_size(old_s, &size));
    OK(MPI_Type_size(new_s, &size2));
    CHECK(size == size2 && size == (int)(sizeof(int) + sizeof(double)));
    OK(MPI_Type_get_extent(new_s, &lb2, &ext2));
    OK(MPI_Type_extent(old_s, &ext));
    OK(MPI_Type_lb(old_s, &lb));
    OK(MPI_Type_ub(old_s, &ub));
    CHECK(lb == lb2 && ext == ext2 && ub == lb2 + ext2);
    CHECK(ext == (MPI_Aint)sizeof s[0]);

    /* A resized type: lb -4, extent 20, so ub 16 (MPI_Type_lb and _ub read the markers). */
    MPI_Datatype rs;
    OK(MPI_Type_create_resized(MPI_INT, -4, 20, &rs));
    OK(MPI_Type_lb(rs, &lb));
    OK(MPI_Type_ub(rs, &ub));
    OK(MPI_Type_extent(rs, &ext));
    CHECK(lb == -4 && ub == 16 && ext == 20);

    /* MPI_Type_hvector and _hindexed (byte strides and displacements) carry the same data as
     * their MPI-2 forms: each rank sends the old form and receives into the new one. */
    MPI_Datatype hv_old, hv_new, hi_old, hi_new;
    OK(MPI_Type_hvector(3, 2, 5 * sizeof(int), MPI_INT, &hv_old));
    OK(MPI_Type_create_hvector(3, 2, 5 * sizeof(int), MPI_INT, &hv_new));
    int hb[3] = {1, 2, 1};
    MPI_Aint hd[3] = {0, 3 * sizeof(int), 9 * sizeof(int)};
    OK(MPI_Type_hindexed(3, hb, hd, MPI_INT, &hi_old));
    OK(MPI_Type_create_hindexed(3, hb, hd, MPI_INT, &hi_new));
    MPI_Datatype all[6] = {old_s, new_s, hv_old, hv_new, hi_old, hi_new};
    for (int i = 0; i < 6; i++)
        OK(MPI_Type_commit(&all[i]));
    int src[16], dst[16];
    for (int i = 0; i < 16; i++)
        src[i] = rank * 100 + i;
    int to = (rank + 1) % n, from = (rank + n - 1) % n;
    for (int k = 0; k < 2; k++) {
        MPI_Datatype o = k ? hi_old : hv_old, w = k ? hi_new : hv_new;
        for (int i = 0; i < 16; i++)
            dst[i] = -1;
        OK(MPI_Sendrecv(src, 1, o, to, k, dst, 1, w, from, k, MPI_COMM_WORLD,
                        MPI_STATUS_IGNORE));
        /* hvector: ints 0,1, 5,6, 10,11; hindexed: 0, 3,4, 9. */
        static const int hv_at[] = {0, 1, 5, 6, 10, 11}, hi_at[] = {0, 3, 4, 9};
        const int *at = k ? hi_at : hv_at;
        int m = k ? 4 : 6, touched = 0;
        for (int i = 0; i < m; i++)
            CHECK(dst[at[i]] == from * 100 + at[i]);
        for (int i = 0; i < 16; i++)
            touched += dst[i] != -1;
        CHECK(touched == m);
    }
    s[0].i = rank;
    s[0].d = rank + 0.5;
    s[1].i = -1;
    s[1].d = -1;
    OK(MPI_Sendrecv(&s[0], 1, old_s, to, 3, &s[1], 1, new_s, from, 3, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    CHECK(s[1].i == from && s[1].d == from + 0.5);

    /* MPI_Type_get_true_extent_x. */
    MPI_Aint tlb, text;
    MPI_Count tlbx, textx;
    OK(MPI_Type_get_true_extent(rs, &tlb, &text));
    OK(MPI_Type_get_true_extent_x(rs, &tlbx, &textx));
    CHECK(tlb == 0 && text == (MPI_Aint)sizeof(int) && tlbx == tlb && textx == text);
    OK(MPI_Type_get_true_extent_x(hi_new, &tlbx, &textx));
    CHECK(tlbx == 0 && textx == 10 * (MPI_Count)sizeof(int));

    /* MPI_Errhandler_create, _set and _get: a handler of the program's, called with the code. */
    MPI_Errhandler eh, got;
    OK(MPI_Errhandler_create(handler, &eh));
    OK(MPI_Errhandler_set(MPI_COMM_WORLD, eh));
    OK(MPI_Errhandler_get(MPI_COMM_WORLD, &got));
    CHECK(got == eh);
    OK(MPI_Errhandler_free(&got));
    int dummy = 0;
    int rc = MPI_Send(&dummy, 1, MPI_INT, n + 5, 0, MPI_COMM_WORLD);
    CHECK(rc != MPI_SUCCESS && called == 1 && last_code == rc);
    int cls;
    OK(MPI_Error_class(rc, &cls));
    CHECK(cls == MPI_ERR_RANK);
    OK(MPI_Errhandler_set(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    OK(MPI_Errhandler_free(&eh));

    /* Names: a handle with two names gives one of them; optional types have theirs. */
    named(MPI_INT, (const char *const[]){"MPI_INT", 0});
    named(MPI_C_COMPLEX, (const char *const[]){"MPI_C_COMPLEX", "MPI_C_FLOAT_COMPLEX", 0});
    named(MPI_LONG_LONG_INT, (const char *const[]){"MPI_LONG_LONG_INT", "MPI_LONG_LONG", 0});
    named(MPI_LONG_DOUBLE, (const char *const[]){"MPI_LONG_DOUBLE", 0});
    if (MPI_REAL16 != MPI_DATATYPE_NULL)
        named(MPI_REAL16, (const char *const[]){"MPI_REAL16", 0});
    if (MPI_INTEGER16 != MPI_DATATYPE_NULL)
        named(MPI_INTEGER16, (const char *const[]){"MPI_INTEGER16", 0});

    /* A real of long double's size. */
    MPI_Datatype ld;
    OK(MPI_Type_match_size(MPI_TYPECLASS_REAL, (int)sizeof(long double), &ld));
    OK(MPI_Type_size(ld, &size));
    CHECK(size == (int)sizeof(long double));

    /* A failing copy callback fails the dup, and no duplicate is left. */
    int kv;
    MPI_Datatype c, d = MPI_INT;
    OK(MPI_Type_contiguous(2, MPI_INT, &c));
    OK(MPI_Type_create_keyval(failing_copy, MPI_TYPE_NULL_DELETE_FN, &kv, NULL));
    OK(MPI_Type_set_attr(c, kv, &kv));
    CHECK(MPI_Type_dup(c, &d) != MPI_SUCCESS);
    CHECK(d == MPI_DATATYPE_NULL);
    OK(MPI_Type_free(&c));
    OK(MPI_Type_free_keyval(&kv));

    for (int i = 0; i < 6; i++)
        OK(MPI_Type_free(&all[i]));
    OK(MPI_Type_free(&rs));
    pass("oldapi");
    return 0;
}
