/* Error handling (MPI-3.1 chapter 8): with MPI_ERRORS_RETURN, invalid arguments are reported as
 * codes of the right class with a string; a user's handler is called with the code. */
#include "check.h"
#include <string.h>

static int handled;
static void handler(MPI_Comm *c, int *code, ...) {
    (void)c;
    int cls;
    MPI_Error_class(*code, &cls);
    if (cls == MPI_ERR_RANK)
        handled++;
}

static int class_of(int rc) {
    int c;
    OK(MPI_Error_class(rc, &c));
    return c;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int size = world_size();
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Errhandler eh;
    OK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &eh));
    CHECK(eh == MPI_ERRORS_RETURN);
    int x = 0;
    CHECK(class_of(MPI_Send(&x, 1, MPI_INT, size, 0, MPI_COMM_WORLD)) == MPI_ERR_RANK);
    CHECK(class_of(MPI_Send(&x, 1, MPI_INT, 0, -5, MPI_COMM_WORLD)) == MPI_ERR_TAG);
    CHECK(class_of(MPI_Send(&x, -1, MPI_INT, 0, 0, MPI_COMM_WORLD)) == MPI_ERR_COUNT);
    CHECK(class_of(MPI_Send(&x, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD)) == MPI_ERR_TYPE);
    CHECK(class_of(MPI_Recv(&x, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE)) == MPI_ERR_RANK);
    CHECK(class_of(MPI_Bcast(&x, 1, MPI_INT, size, MPI_COMM_WORLD)) == MPI_ERR_ROOT);
    MPI_Datatype t;
    OK(MPI_Type_contiguous(2, MPI_INT, &t));
    /* Not committed. */
    CHECK(class_of(MPI_Send(&x, 1, t, 0, 0, MPI_COMM_WORLD)) == MPI_ERR_TYPE);
    OK(MPI_Type_free(&t));
    /* An invalid communicator: the error goes to MPI_COMM_WORLD's handler (returns here). */
    CHECK(class_of(MPI_Send(&x, 1, MPI_INT, 0, 0, MPI_COMM_NULL)) == MPI_ERR_COMM);
    /* Every class has a string. */
    for (int c = MPI_SUCCESS; c <= MPI_ERR_TRUNCATE; c++) {
        char s[MPI_MAX_ERROR_STRING];
        int len = 0;
        OK(MPI_Error_string(c, s, &len));
        CHECK(len > 0 && (int)strlen(s) == len);
    }
    /* A user handler on a duplicate. */
    MPI_Comm d;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    MPI_Errhandler mine;
    OK(MPI_Comm_create_errhandler(handler, &mine));
    OK(MPI_Comm_set_errhandler(d, mine));
    MPI_Send(&x, 1, MPI_INT, size + 1, 0, d);
    CHECK(handled == 1);
    OK(MPI_Comm_call_errhandler(d, MPI_ERR_RANK));
    CHECK(handled == 2);
    OK(MPI_Errhandler_free(&mine));
    OK(MPI_Comm_free(&d));
    pass("errors");
    return 0;
}
