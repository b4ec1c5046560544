/* Info objects (MPI-3.1 chapter 9): set, get, replace, delete, count, nth key, dup, free; and
 * MPI-4.0's MPI_Info_get_string (10.3: buflen says the value's length with its NUL, whether or
 * not it fitted; a short buffer gets the value cut, NUL-terminated) and its rule that info
 * objects may be made and used before MPI_Init and after MPI_Finalize (11.2.1), the handles
 * staying good across both. */
#include "check.h"
#include <string.h>

int main(int argc, char **argv) {
    /* Before MPI_Init: made, set, duplicated, one of them freed. Checked once MPI runs. */
    MPI_Info early, early_copy, gone, env;
    int env_made = MPI_Info_create_env(argc, argv, &env) == MPI_SUCCESS;
    const char *command = argv[0];
    int before = MPI_Info_create(&early) == MPI_SUCCESS && MPI_Info_create(&gone) == MPI_SUCCESS &&
                 MPI_Info_set(early, "made", "before init") == MPI_SUCCESS &&
                 MPI_Info_dup(early, &early_copy) == MPI_SUCCESS &&
                 MPI_Info_set(early_copy, "copy", "yes") == MPI_SUCCESS &&
                 MPI_Info_free(&gone) == MPI_SUCCESS && gone == MPI_INFO_NULL;
    MPI_Init(&argc, &argv);
    CHECK(before && env_made);
    {
        /* MPI_Info_create_env (MPI-4.0 11.2.1), made before MPI_Init: where the keys are there,
         * the command is this program and maxprocs the number of processes started. */
        char v[MPI_MAX_INFO_VAL];
        int flag = 0;
        OK(MPI_Info_get(env, "command", MPI_MAX_INFO_VAL - 1, v, &flag));
        CHECK(!flag || strcmp(v, command) == 0);
        OK(MPI_Info_get(env, "maxprocs", MPI_MAX_INFO_VAL - 1, v, &flag));
        CHECK(!flag || atoi(v) == world_size());
        OK(MPI_Info_free(&env));
    }
    {
        char v[MPI_MAX_INFO_VAL];
        int flag = 0, n = -1;
        OK(MPI_Info_get(early, "made", MPI_MAX_INFO_VAL - 1, v, &flag));
        CHECK(flag && strcmp(v, "before init") == 0);
        OK(MPI_Info_get(early, "copy", MPI_MAX_INFO_VAL - 1, v, &flag));
        CHECK(!flag);
        OK(MPI_Info_get_nkeys(early_copy, &n));
        CHECK(n == 2);
        OK(MPI_Info_set(early, "seen", "while running"));
    }
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
    /* After MPI_Finalize: the early objects still hold what they were given, and can be changed
     * and freed. (No MPI_Abort now: a failure is the exit code.) */
    flag = 0;
    n = -1;
    if (MPI_Info_get(early, "seen", MPI_MAX_INFO_VAL - 1, v, &flag) != MPI_SUCCESS || !flag ||
        strcmp(v, "while running") != 0 || MPI_Info_delete(early, "made") != MPI_SUCCESS ||
        MPI_Info_get_nkeys(early, &n) != MPI_SUCCESS || n != 1 ||
        MPI_Info_free(&early) != MPI_SUCCESS || MPI_Info_free(&early_copy) != MPI_SUCCESS ||
        early != MPI_INFO_NULL) {
        fprintf(stderr, "FAILED: info objects after MPI_Finalize\n");
        return 1;
    }
    return 0;
}
