/* Info objects (MPI-3.1 chapter 9): set, get, replace, delete, count, nth key, dup, free; and
 * MPI-4.0's MPI_Info_get_string (10.3: buflen says the value's length with its NUL, whether or
 * not it fitted; a short buffer gets the value cut, NUL-terminated). */
#include "check.h"
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Info info, copy;
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "alpha", "1"));
    OK(MPI_Info_set(info, "beta", "two"));
    OK(MPI_Info_set(info, "alpha", "one"));
    int n, flag, len;
    OK(MPI_Info_get_nkeys(info, &n));
    CHECK(n == 2);
    char v[MPI_MAX_INFO_VAL], k[MPI_MAX_INFO_KEY];
    OK(MPI_Info_get(info, "alpha", MPI_MAX_INFO_VAL - 1, v, &flag));
    CHECK(flag && strcmp(v, "one") == 0);
    OK(MPI_Info_get_valuelen(info, "beta", &len, &flag));
    CHECK(flag && len == 3);
    OK(MPI_Info_get(info, "gamma", MPI_MAX_INFO_VAL - 1, v, &flag));
    CHECK(!flag);
    int buflen = MPI_MAX_INFO_VAL;
    OK(MPI_Info_get_string(info, "beta", &buflen, v, &flag));
    CHECK(flag && buflen == 4 && strcmp(v, "two") == 0);
    buflen = 3;
    OK(MPI_Info_get_string(info, "beta", &buflen, v, &flag));
    CHECK(flag && buflen == 4 && strcmp(v, "tw") == 0);
    buflen = 0;
    OK(MPI_Info_get_string(info, "alpha", &buflen, v, &flag));
    CHECK(flag && buflen == 4);
    buflen = 7;
    OK(MPI_Info_get_string(info, "gamma", &buflen, v, &flag));
    CHECK(!flag && buflen == 7);
    OK(MPI_Info_get_nthkey(info, 1, k));
    CHECK(strcmp(k, "beta") == 0);
    OK(MPI_Info_dup(info, &copy));
    OK(MPI_Info_delete(info, "alpha"));
    OK(MPI_Info_get_nkeys(info, &n));
    CHECK(n == 1);
    OK(MPI_Info_get_nkeys(copy, &n));
    CHECK(n == 2);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int rc = MPI_Info_delete(info, "alpha"), cls;
    OK(MPI_Error_class(rc, &cls));
    CHECK(cls == MPI_ERR_INFO_NOKEY);
    OK(MPI_Info_free(&info));
    OK(MPI_Info_free(&copy));
    CHECK(info == MPI_INFO_NULL && copy == MPI_INFO_NULL);
    pass("info");
    return 0;
}
