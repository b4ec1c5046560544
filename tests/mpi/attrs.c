/* Attribute caching (MPI-3.1 section 6.7): copy callbacks run on dup, delete callbacks on free
 * and on replacement; predefined attributes of MPI_COMM_WORLD. */
#include "check.h"

static int copies, deletes;

static int copy_fn(MPI_Comm c, int key, void *extra, void *in, void *out, int *flag) {
    (void)c; (void)key; (void)extra;
    copies++;
    *(void **)out = (void *)((char *)in + 1);
    *flag = 1;
    return MPI_SUCCESS;
}

static int delete_fn(MPI_Comm c, int key, void *val, void *extra) {
    (void)c; (void)key; (void)val;
    deletes++;
    CHECK(extra == (void *)&deletes);
    return MPI_SUCCESS;
}

static int failing_copy(MPI_Comm c, int key, void *extra, void *in, void *out, int *flag) {
    (void)c; (void)key; (void)extra; (void)in; (void)out;
    *flag = 0;
    return MPI_ERR_OTHER;
}

/* A copy callback that fails with an error code of the program's own (MPI_Add_error_code). */
static int my_code;
static int failing_own(MPI_Comm c, int key, void *extra, void *in, void *out, int *flag) {
    (void)c; (void)key; (void)extra; (void)in; (void)out;
    *flag = 0;
    return my_code;
}

static int at_finalize(MPI_Comm c, int key, void *val, void *extra) {
    (void)key; (void)val; (void)extra;
    if (c == MPI_COMM_SELF && world_rank() == 0) {
        printf("attrs: MPI_COMM_SELF's attribute deleted at MPI_Finalize\n");
        fflush(stdout);
    }
    return MPI_SUCCESS;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int key, nocopy, flag;
    void *v;
    OK(MPI_Comm_create_keyval(copy_fn, delete_fn, &key, &deletes));
    OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &nocopy, NULL));
    MPI_Comm c;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
    OK(MPI_Comm_get_attr(c, key, &v, &flag));
    CHECK(!flag);
    OK(MPI_Comm_set_attr(c, key, (void *)100));
    OK(MPI_Comm_set_attr(c, nocopy, (void *)7));
    OK(MPI_Comm_get_attr(c, key, &v, &flag));
    CHECK(flag && v == (void *)100);
    /* Replacing runs the delete callback on the old value. */
    OK(MPI_Comm_set_attr(c, key, (void *)200));
    CHECK(deletes == 1);
    MPI_Comm d;
    OK(MPI_Comm_dup(c, &d));
    CHECK(copies == 1);
    OK(MPI_Comm_get_attr(d, key, &v, &flag));
    CHECK(flag && v == (void *)201);
    OK(MPI_Comm_get_attr(d, nocopy, &v, &flag));
    CHECK(!flag);
    OK(MPI_Comm_delete_attr(d, key));
    CHECK(deletes == 2);
    OK(MPI_Comm_free(&d));
    CHECK(deletes == 2);
    OK(MPI_Comm_free(&c));
    CHECK(deletes == 3);
    OK(MPI_Comm_free_keyval(&key));
    CHECK(key == MPI_KEYVAL_INVALID);
    OK(MPI_Comm_free_keyval(&nocopy));
    /* Predefined attributes. */
    int *ub;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
    CHECK(flag && *ub >= 32767);
    int *wg;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &wg, &flag));
    CHECK(!flag || *wg == 0 || *wg == 1);
    int *us;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &us, &flag));
    CHECK(!flag || *us >= world_size());
    /* The largest tag is usable. */
    int rank = world_rank();
    if (world_size() >= 2 && rank < 2) {
        int x = rank;
        OK(MPI_Sendrecv_replace(&x, 1, MPI_INT, 1 - rank, *ub, 1 - rank, *ub, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(x == 1 - rank);
    }
    /* A copy callback that fails makes MPI_Comm_dup fail with MPI_COMM_NULL (MPI-3.1 6.7.2). */
    int bad;
    OK(MPI_Comm_create_keyval(failing_copy, MPI_COMM_NULL_DELETE_FN, &bad, NULL));
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, bad, (void *)1));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Comm nope = MPI_COMM_WORLD;
    CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &nope) != MPI_SUCCESS);
    CHECK(nope == MPI_COMM_NULL);
    OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, bad));
    OK(MPI_Comm_free_keyval(&bad));
    /* The callback's own error code is what the failed call returns (MPICH does the same). */
    int my_class;
    OK(MPI_Add_error_class(&my_class));
    OK(MPI_Add_error_code(my_class, &my_code));
    OK(MPI_Comm_create_keyval(failing_own, MPI_COMM_NULL_DELETE_FN, &bad, NULL));
    OK(MPI_Comm_set_attr(MPI_COMM_WORLD, bad, (void *)1));
    int rc = MPI_Comm_dup(MPI_COMM_WORLD, &nope), cls = -1;
    CHECK(rc == my_code);
    OK(MPI_Error_class(rc, &cls));
    CHECK(cls == my_class);
    OK(MPI_Comm_delete_attr(MPI_COMM_WORLD, bad));
    OK(MPI_Comm_free_keyval(&bad));
    /* MPI_COMM_SELF's attributes are deleted by MPI_Finalize. */
    int fin;
    OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, at_finalize, &fin, NULL));
    OK(MPI_Comm_set_attr(MPI_COMM_SELF, fin, (void *)1));
    pass("attrs");
    return 0;
}
