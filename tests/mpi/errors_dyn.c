/* Error classes, codes and strings added at run time (MPI-3.1 8.5): MPI_Add_error_class,
 * MPI_Add_error_code, MPI_Add_error_string; MPI_Error_class and MPI_Error_string on them; the
 * MPI_LASTUSEDCODE attribute of MPI_COMM_WORLD; MPI_Comm_call_errhandler with a new code. */
#include "check.h"
#include <string.h>

static int handled, handled_code;
static void handler(MPI_Comm *c, int *code, ...) {
    (void)c;
    handled++;
    handled_code = *code;
}

/* MPI_LASTUSEDCODE: "the current maximum error class including the user-defined ones". */
static int last_used(void) {
    int *p = NULL, flag = 0;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &p, &flag));
    CHECK(flag && p != NULL);
    CHECK(*p >= MPI_ERR_LASTCODE);
    return *p;
}

static int class_of(int code) {
    int c = -1;
    OK(MPI_Error_class(code, &c));
    return c;
}

/* The string MPI_Error_string gives for code is want, with its length. */
static void string_is(int code, const char *want) {
    char s[MPI_MAX_ERROR_STRING];
    int len = -1;
    memset(s, 'x', sizeof s);
    OK(MPI_Error_string(code, s, &len));
    CHECK(strcmp(s, want) == 0 && len == (int)strlen(want));
}

static int max2(int a, int b) { return a > b ? a : b; }

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));

    int before = last_used();
    int cls = -1, c1 = -1, c2 = -1;
    OK(MPI_Add_error_class(&cls));
    CHECK(cls != MPI_SUCCESS);
    /* The attribute is the largest class, the new one included. */
    int after_cls = last_used();
    CHECK(after_cls == max2(before, cls));
    OK(MPI_Add_error_code(cls, &c1));
    OK(MPI_Add_error_code(cls, &c2));
    /* Classes are codes too, so new codes differ from their class and from each other. */
    CHECK(c1 != c2 && c1 != cls && c2 != cls && c1 != MPI_SUCCESS && c2 != MPI_SUCCESS);
    CHECK(class_of(c1) == cls && class_of(c2) == cls && class_of(cls) == cls);
    /* Adding codes adds no class. */
    CHECK(last_used() == after_cls);

    /* A second class, with a code of its own. */
    int cls2 = -1, c3 = -1;
    OK(MPI_Add_error_class(&cls2));
    CHECK(cls2 != cls && cls2 != c1 && cls2 != c2);
    CHECK(last_used() == max2(after_cls, cls2));
    OK(MPI_Add_error_code(cls2, &c3));
    CHECK(c3 != c1 && c3 != c2 && c3 != cls && c3 != cls2);
    CHECK(class_of(c3) == cls2 && class_of(cls2) == cls2 && class_of(c1) == cls);

    /* No string yet: the empty string. */
    string_is(c1, "");
    string_is(cls, "");

    /* Strings on the class and on each code; setting one again replaces it. */
    OK(MPI_Add_error_string(cls, "volley test: the class"));
    OK(MPI_Add_error_string(c1, "volley test: first code"));
    OK(MPI_Add_error_string(c2, "volley test: second code (old)"));
    OK(MPI_Add_error_string(c3, "volley test: third code"));
    string_is(cls, "volley test: the class");
    string_is(c1, "volley test: first code");
    string_is(c2, "volley test: second code (old)");
    string_is(c3, "volley test: third code");
    OK(MPI_Add_error_string(c2, "volley test: second code"));
    string_is(c2, "volley test: second code");
    string_is(c1, "volley test: first code");
    string_is(cls2, "");

    /* A string for a value that is no error code: an error, returned. */
    int top = max2(max2(max2(c1, c2), max2(c3, cls2)), last_used());
    CHECK(MPI_Add_error_string(-5, "nothing") != MPI_SUCCESS);
    CHECK(MPI_Add_error_string(top + 1000, "nothing") != MPI_SUCCESS);

    /* MPI_Comm_call_errhandler with a new code: MPI_ERRORS_RETURN returns, and then the call
     * returns MPI_SUCCESS ("if the error handler was successfully called"). */
    CHECK(MPI_Comm_call_errhandler(MPI_COMM_WORLD, c1) == MPI_SUCCESS);
    /* A user's handler is given the code itself. */
    MPI_Comm d;
    MPI_Errhandler eh;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    OK(MPI_Comm_create_errhandler(handler, &eh));
    OK(MPI_Comm_set_errhandler(d, eh));
    OK(MPI_Comm_call_errhandler(d, c2));
    CHECK(handled == 1 && handled_code == c2 && class_of(handled_code) == cls);
    OK(MPI_Comm_call_errhandler(d, cls2));
    CHECK(handled == 2 && handled_code == cls2);
    OK(MPI_Errhandler_free(&eh));
    OK(MPI_Comm_free(&d));

    pass("errors_dyn");
    return 0;
}
