/* Reductions on C's long double, which Rust has no type for (x86-64's 80-bit extended precision
 * in 16 bytes; other targets' own format): MPI_SUM and the others on MPI_LONG_DOUBLE,
 * MPI_C_LONG_DOUBLE_COMPLEX and MPI_LONG_DOUBLE_INT, on packed elements (no alignment assumed).
 * Called by coll.rs's `apply`; the operation codes are `LdOp` there. */
#include <stddef.h>
#include <string.h>

enum { SUM, PROD, MIN, MAX, LAND, LOR, LXOR, MINLOC, MAXLOC, CSUM, CPROD };

/* inout[i] = in[i] op inout[i] for n elements; returns 0, or -1 for an unknown op. */
int volley_long_double_op(int op, const unsigned char *in, unsigned char *inout, size_t n) {
    const size_t ld = sizeof(long double);
    if (op == CSUM || op == CPROD) {
        for (size_t i = 0; i < n; i++) {
            long double a[2], b[2], r[2];
            memcpy(a, in + i * 2 * ld, 2 * ld);
            memcpy(b, inout + i * 2 * ld, 2 * ld);
            if (op == CSUM) {
                r[0] = a[0] + b[0];
                r[1] = a[1] + b[1];
            } else {
                r[0] = a[0] * b[0] - a[1] * b[1];
                r[1] = a[0] * b[1] + a[1] * b[0];
            }
            memcpy(inout + i * 2 * ld, r, 2 * ld);
        }
        return 0;
    }
    if (op == MINLOC || op == MAXLOC) {
        /* Packed pairs: the value, then its int. */
        const size_t step = ld + sizeof(int);
        for (size_t i = 0; i < n; i++) {
            long double x, y;
            int xi, yi;
            memcpy(&x, in + i * step, ld);
            memcpy(&xi, in + i * step + ld, sizeof xi);
            memcpy(&y, inout + i * step, ld);
            memcpy(&yi, inout + i * step + ld, sizeof yi);
            int better = op == MINLOC ? x < y : x > y;
            if (better || (x == y && xi < yi)) {
                memcpy(inout + i * step, &x, ld);
                memcpy(inout + i * step + ld, &xi, sizeof xi);
            }
        }
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        long double x, y, r;
        memcpy(&x, in + i * ld, ld);
        memcpy(&y, inout + i * ld, ld);
        switch (op) {
        case SUM: r = x + y; break;
        case PROD: r = x * y; break;
        case MIN: r = x < y ? x : y; break;
        case MAX: r = x > y ? x : y; break;
        case LAND: r = (x != 0) && (y != 0); break;
        case LOR: r = (x != 0) || (y != 0); break;
        case LXOR: r = (x != 0) != (y != 0); break;
        default: return -1;
        }
        memcpy(inout + i * ld, &r, ld);
    }
    return 0;
}
