/* MPI_T, the tool information interface (MPI-3.1 chapter 14), as a tool that knows nothing of
 * the MPI it runs on uses it: initialised before MPI_Init (and twice), every control variable,
 * performance variable and category listed with the string rules of 14.3.3 (no length: nothing
 * written; no buffer or a length of 0: the whole length with its NUL; else cut and terminated),
 * found again by name, control variables read, performance variables read in a session around
 * some traffic (a counter never goes back), the errors the standard names for a bad index, a bad
 * name, a write to a read-only variable, a start of a continuous one, and a call after the last
 * MPI_T_finalize. Prints, from rank 0, how many counters moved and the value of the control
 * variable named by the program's argument (if there is one of that name). */
#include "check.h"
#include <string.h>

#define T_OK(call) CHECK((call) == MPI_SUCCESS)

/* The string rules of 14.3.3, for a name and a description read by `get` (one variable). */
typedef int (*get_strings)(int i, char *name, int *name_len, char *desc, int *desc_len);

static void check_strings(int i, get_strings get) {
    int full_name = 1, full_desc = 1;
    T_OK(get(i, NULL, &full_name, NULL, &full_desc));
    CHECK(full_name >= 1 && full_desc >= 1);
    char name[8] = "", desc[8] = "";
    int name_len = 0, desc_len = 0;
    T_OK(get(i, name, &name_len, desc, &desc_len));
    CHECK(name_len == full_name && desc_len == full_desc && name[0] == 0);
    char small[6];
    memset(small, 'x', sizeof small);
    name_len = 4;
    T_OK(get(i, small, &name_len, NULL, NULL));
    CHECK(strlen(small) + 1 == (size_t)(full_name < 4 ? full_name : 4));
    CHECK(small[4] == 'x' && small[5] == 'x');
    memset(small, 'y', sizeof small);
    T_OK(get(i, small, NULL, NULL, NULL));
    CHECK(small[0] == 'y');
}

static int cvar_strings(int i, char *name, int *name_len, char *desc, int *desc_len) {
    int verbosity, binding, scope;
    MPI_Datatype dt;
    MPI_T_enum et;
    return MPI_T_cvar_get_info(i, name, name_len, &verbosity, &dt, &et, desc, desc_len, &binding,
                               &scope);
}

static int pvar_strings(int i, char *name, int *name_len, char *desc, int *desc_len) {
    int verbosity, klass, binding, ro, cont, atomic;
    MPI_Datatype dt;
    MPI_T_enum et;
    return MPI_T_pvar_get_info(i, name, name_len, &verbosity, &klass, &dt, &et, desc, desc_len,
                               &binding, &ro, &cont, &atomic);
}

static int cat_strings(int i, char *name, int *name_len, char *desc, int *desc_len) {
    int nc, np, ncat;
    return MPI_T_category_get_info(i, name, name_len, desc, desc_len, &nc, &np, &ncat);
}

/* A counter's value, for the integer types MPI_T allows. */
static int read_counter(MPI_T_pvar_session s, MPI_T_pvar_handle h, MPI_Datatype dt,
                        unsigned long long *v) {
    union {
        unsigned u;
        unsigned long ul;
        unsigned long long ull;
        double d;
        char pad[64];
    } buf;
    int rc = MPI_T_pvar_read(s, h, &buf);
    if (rc != MPI_SUCCESS)
        return rc;
    if (dt == MPI_UNSIGNED)
        *v = buf.u;
    else if (dt == MPI_UNSIGNED_LONG)
        *v = buf.ul;
    else
        *v = buf.ull;
    return MPI_SUCCESS;
}

int main(int argc, char **argv) {
    int provided;
    /* Before MPI_Init, and twice: each init needs its finalize. */
    int early = MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS &&
                MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS;
    int ncvar_early = -1;
    early = early && MPI_T_cvar_get_num(&ncvar_early) == MPI_SUCCESS;
    MPI_Init(&argc, &argv);
    CHECK(early && ncvar_early >= 0);
    int rank = world_rank(), size = world_size();
    const char *wanted = argc > 1 ? argv[1] : NULL;

    /* Control variables. */
    int ncvar;
    T_OK(MPI_T_cvar_get_num(&ncvar));
    CHECK(ncvar >= ncvar_early);
    for (int i = 0; i < ncvar; i++) {
        check_strings(i, cvar_strings);
        char name[256];
        int name_len = sizeof name, verbosity, binding, scope, index = -1;
        MPI_Datatype dt;
        MPI_T_enum et;
        T_OK(MPI_T_cvar_get_info(i, name, &name_len, &verbosity, &dt, &et, NULL, NULL, &binding,
                                 &scope));
        T_OK(MPI_T_cvar_get_index(name, &index));
        CHECK(index == i);
        if (binding != MPI_T_BIND_NO_OBJECT)
            continue;
        MPI_T_cvar_handle h;
        int count;
        T_OK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count));
        CHECK(h != MPI_T_CVAR_HANDLE_NULL && count >= 1);
        if (dt == MPI_CHAR) {
            char *v = malloc((size_t)count);
            CHECK(v);
            int rc = MPI_T_cvar_read(h, v);
            CHECK(rc == MPI_SUCCESS);
            if (rc == MPI_SUCCESS) {
                CHECK(memchr(v, 0, (size_t)count) != NULL);
                if (wanted && strcmp(name, wanted) == 0 && rank == 0)
                    printf("cvar %s = %s\n", name, v);
            }
            free(v);
        }
        T_OK(MPI_T_cvar_handle_free(&h));
        CHECK(h == MPI_T_CVAR_HANDLE_NULL);
    }
    {
        int index, verbosity, binding, scope;
        MPI_Datatype dt;
        MPI_T_enum et;
        CHECK(MPI_T_cvar_get_info(ncvar, NULL, NULL, &verbosity, &dt, &et, NULL, NULL, &binding,
                                  &scope) == MPI_T_ERR_INVALID_INDEX);
        CHECK(MPI_T_cvar_get_index("no such variable, surely", &index) == MPI_T_ERR_INVALID_NAME);
    }

    /* Performance variables: every counter bound to no object, read before and after some
     * traffic in one session. */
    int npvar;
    T_OK(MPI_T_pvar_get_num(&npvar));
    MPI_T_pvar_session session;
    T_OK(MPI_T_pvar_session_create(&session));
    MPI_T_pvar_handle *hs = calloc((size_t)npvar + 1, sizeof *hs);
    unsigned long long *before = calloc((size_t)npvar + 1, sizeof *before);
    MPI_Datatype *dts = calloc((size_t)npvar + 1, sizeof *dts);
    CHECK(hs && before && dts);
    for (int i = 0; i < npvar; i++) {
        check_strings(i, pvar_strings);
        char name[256];
        int name_len = sizeof name, verbosity, klass, binding, ro, cont, atomic, index = -1;
        MPI_T_enum et;
        T_OK(MPI_T_pvar_get_info(i, name, &name_len, &verbosity, &klass, &dts[i], &et, NULL, NULL,
                                 &binding, &ro, &cont, &atomic));
        T_OK(MPI_T_pvar_get_index(name, klass, &index));
        CHECK(index == i);
        hs[i] = MPI_T_PVAR_HANDLE_NULL;
        int integer = dts[i] == MPI_UNSIGNED || dts[i] == MPI_UNSIGNED_LONG ||
                      dts[i] == MPI_UNSIGNED_LONG_LONG;
        if (klass != MPI_T_PVAR_CLASS_COUNTER || binding != MPI_T_BIND_NO_OBJECT || !integer)
            continue;
        int count;
        T_OK(MPI_T_pvar_handle_alloc(session, i, NULL, &hs[i], &count));
        if (count != 1) {
            T_OK(MPI_T_pvar_handle_free(session, &hs[i]));
            continue;
        }
        if (cont)
            CHECK(MPI_T_pvar_start(session, hs[i]) == MPI_T_ERR_PVAR_NO_STARTSTOP);
        else
            T_OK(MPI_T_pvar_start(session, hs[i]));
        if (ro) {
            unsigned long long zero[8] = {0};
            CHECK(MPI_T_pvar_write(session, hs[i], zero) == MPI_T_ERR_PVAR_NO_WRITE);
        }
        T_OK(read_counter(session, hs[i], dts[i], &before[i]));
    }
    /* Traffic: a ring of messages small and large, and a few collectives. */
    {
        enum { N = 1 << 18 };
        char *out = malloc(N), *in = malloc(N);
        CHECK(out && in);
        memset(out, rank, N);
        for (int k = 0; k < 20; k++) {
            int bytes = k % 2 ? N : 8;
            OK(MPI_Sendrecv(out, bytes, MPI_BYTE, (rank + 1) % size, k, in, bytes, MPI_BYTE,
                            (rank + size - 1) % size, k, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(in[bytes - 1] == (char)((rank + size - 1) % size));
        }
        int x = 1, sum;
        OK(MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        CHECK(sum == size);
        free(out);
        free(in);
    }
    int moved = 0;
    for (int i = 0; i < npvar; i++) {
        if (hs[i] == MPI_T_PVAR_HANDLE_NULL)
            continue;
        unsigned long long after = 0;
        T_OK(read_counter(session, hs[i], dts[i], &after));
        CHECK(after >= before[i]);
        moved += after > before[i];
        T_OK(MPI_T_pvar_handle_free(session, &hs[i]));
        CHECK(hs[i] == MPI_T_PVAR_HANDLE_NULL);
    }
    T_OK(MPI_T_pvar_session_free(&session));
    CHECK(session == MPI_T_PVAR_SESSION_NULL);
    {
        /* (An index past the last performance variable is not asked: Debian's MPICH 4.0.2
         * crashes on it.) */
        int index;
        CHECK(MPI_T_pvar_get_index("no such variable, surely", MPI_T_PVAR_CLASS_COUNTER,
                                   &index) == MPI_T_ERR_INVALID_NAME);
    }
    free(hs);
    free(before);
    free(dts);

    /* Categories: their members are valid indices, and each is found again by name. */
    int ncat;
    T_OK(MPI_T_category_get_num(&ncat));
    for (int c = 0; c < ncat; c++) {
        check_strings(c, cat_strings);
        char name[256];
        int name_len = sizeof name, nc, np, ncats, index = -1;
        T_OK(MPI_T_category_get_info(c, name, &name_len, NULL, NULL, &nc, &np, &ncats));
        T_OK(MPI_T_category_get_index(name, &index));
        CHECK(index == c);
        int *idx = malloc(sizeof(int) * (size_t)(nc + np + ncats + 1));
        CHECK(idx);
        T_OK(MPI_T_category_get_cvars(c, nc, idx));
        for (int k = 0; k < nc; k++)
            CHECK(idx[k] >= 0 && idx[k] < ncvar);
        T_OK(MPI_T_category_get_pvars(c, np, idx));
        for (int k = 0; k < np; k++)
            CHECK(idx[k] >= 0 && idx[k] < npvar);
        T_OK(MPI_T_category_get_categories(c, ncats, idx));
        for (int k = 0; k < ncats; k++)
            CHECK(idx[k] >= 0 && idx[k] < ncat);
        free(idx);
    }
    int stamp;
    T_OK(MPI_T_category_changed(&stamp));

    /* The classes are error classes MPI knows. */
    int cls, len;
    char text[MPI_MAX_ERROR_STRING];
    OK(MPI_Error_class(MPI_T_ERR_INVALID_INDEX, &cls));
    CHECK(cls == MPI_T_ERR_INVALID_INDEX);
    OK(MPI_Error_string(MPI_T_ERR_INVALID_NAME, text, &len));
    CHECK(len > 0 && strlen(text) == (size_t)len);

    /* Two inits, two finalizes; then the interface is closed. */
    T_OK(MPI_T_finalize());
    T_OK(MPI_T_cvar_get_num(&ncvar));
    T_OK(MPI_T_finalize());
    CHECK(MPI_T_cvar_get_num(&ncvar) == MPI_T_ERR_NOT_INITIALIZED);

    if (rank == 0)
        printf("counters moved: %d\n", moved);
    pass("mpi_t");
    return 0;
}
