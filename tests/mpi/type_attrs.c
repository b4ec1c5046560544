/* Attributes cached on datatypes (MPI-3.1 6.7.2, 6.7.4): keyvals with copy and delete
 * callbacks and with MPI_TYPE_NULL_COPY_FN, MPI_TYPE_DUP_FN and MPI_TYPE_NULL_DELETE_FN; set,
 * get, delete and replace; MPI_Type_dup copying through the copy callback; MPI_Type_free
 * deleting what the type holds; MPI_Type_free_keyval. Counters in extra_state count calls. */
#include "check.h"
#include <string.h>

#define MAGIC 0x5eed

struct state {
    int magic;
    int copies, deletes;
    int copy_keyval;              /* the keyval the last copy callback was given */
    MPI_Datatype copy_from;       /* and the type */
    intptr_t copied_in, deleted;  /* the last value copied, and the last deleted */
    int copy_flag;                /* what the copy callback answers: 1 copies (value + 1000) */
};

static int copy_fn(MPI_Datatype old, int keyval, void *extra, void *in, void *out, int *flag) {
    struct state *s = extra;
    CHECK(s->magic == MAGIC);
    s->copies++;
    s->copy_keyval = keyval;
    s->copy_from = old;
    s->copied_in = (intptr_t)in;
    *flag = s->copy_flag;
    if (s->copy_flag)
        *(void **)out = (void *)((intptr_t)in + 1000);
    return MPI_SUCCESS;
}

static int delete_fn(MPI_Datatype t, int keyval, void *value, void *extra) {
    (void)t;
    (void)keyval;
    struct state *s = extra;
    CHECK(s->magic == MAGIC);
    s->deletes++;
    s->deleted = (intptr_t)value;
    return MPI_SUCCESS;
}

static void *val(intptr_t v) { return (void *)v; }

/* The value of keyval on t, or -1 when t holds none. */
static intptr_t get(MPI_Datatype t, int keyval) {
    void *v = val(-7);
    int flag = -1;
    OK(MPI_Type_get_attr(t, keyval, &v, &flag));
    CHECK(flag == 0 || flag == 1);
    return flag ? (intptr_t)v : -1;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct state sa = {MAGIC, 0, 0, 0, MPI_DATATYPE_NULL, 0, 0, 1};
    struct state sb = sa, sc = sa, se = sa;
    se.copy_flag = 0;
    int ka, kb, kc, kd, ke;
    /* A: own copy (value + 1000) and delete; B: MPI_TYPE_DUP_FN; C: MPI_TYPE_NULL_COPY_FN;
     * D: both null; E: own copy that declines to copy. */
    OK(MPI_Type_create_keyval(copy_fn, delete_fn, &ka, &sa));
    OK(MPI_Type_create_keyval(MPI_TYPE_DUP_FN, delete_fn, &kb, &sb));
    OK(MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, delete_fn, &kc, &sc));
    OK(MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, MPI_TYPE_NULL_DELETE_FN, &kd, NULL));
    OK(MPI_Type_create_keyval(copy_fn, delete_fn, &ke, &se));
    CHECK(ka != kb && ka != kc && kb != kc && kd != ka && ke != ka && ke != kd);

    MPI_Datatype t, t2, t3;
    OK(MPI_Type_contiguous(3, MPI_INT, &t));
    OK(MPI_Type_commit(&t));

    /* Nothing before a set. */
    CHECK(get(t, ka) == -1 && get(t, kb) == -1 && get(t, kc) == -1 && get(t, kd) == -1);

    OK(MPI_Type_set_attr(t, ka, val(10)));
    OK(MPI_Type_set_attr(t, kb, val(20)));
    OK(MPI_Type_set_attr(t, kc, val(30)));
    OK(MPI_Type_set_attr(t, kd, val(40)));
    OK(MPI_Type_set_attr(t, ke, val(50)));
    CHECK(get(t, ka) == 10 && get(t, kb) == 20 && get(t, kc) == 30 && get(t, kd) == 40);
    CHECK(get(t, ke) == 50);
    CHECK(sa.deletes == 0 && sb.deletes == 0 && sc.deletes == 0 && sa.copies == 0);

    /* Setting again deletes the old value first. */
    OK(MPI_Type_set_attr(t, ka, val(11)));
    CHECK(sa.deletes == 1 && sa.deleted == 10 && get(t, ka) == 11);

    /* Delete: the callback runs once with the value, and the attribute is gone. */
    OK(MPI_Type_delete_attr(t, kc));
    CHECK(sc.deletes == 1 && sc.deleted == 30 && get(t, kc) == -1);
    OK(MPI_Type_delete_attr(t, kd));
    CHECK(get(t, kd) == -1 && get(t, ka) == 11);
    OK(MPI_Type_set_attr(t, kc, val(31)));
    OK(MPI_Type_set_attr(t, kd, val(41)));
    CHECK(sc.deletes == 1);

    /* Dup: A through its callback, B as is, C and D not at all, E declined. */
    OK(MPI_Type_dup(t, &t2));
    CHECK(sa.copies == 1 && sa.copy_keyval == ka && sa.copy_from == t && sa.copied_in == 11);
    CHECK(se.copies == 1 && se.copy_keyval == ke && se.copied_in == 50);
    CHECK(get(t2, ka) == 1011 && get(t2, kb) == 20);
    CHECK(get(t2, kc) == -1 && get(t2, kd) == -1 && get(t2, ke) == -1);
    /* The original is untouched. */
    CHECK(get(t, ka) == 11 && get(t, kb) == 20 && get(t, kc) == 31 && get(t, kd) == 41);
    CHECK(get(t, ke) == 50);
    CHECK(sa.deletes == 1 && sb.deletes == 0 && sc.deletes == 1 && se.deletes == 0);
    /* The dup is a type like the original. */
    int size;
    OK(MPI_Type_size(t2, &size));
    CHECK(size == 3 * (int)sizeof(int));

    /* An attribute set on the dup stays on the dup. */
    OK(MPI_Type_set_attr(t2, kc, val(32)));
    CHECK(get(t, kc) == 31 && get(t2, kc) == 32);

    /* A dup of the dup copies again, from the dup's values. */
    OK(MPI_Type_dup(t2, &t3));
    CHECK(sa.copies == 2 && sa.copy_from == t2 && sa.copied_in == 1011 && get(t3, ka) == 2011);
    CHECK(get(t3, kb) == 20 && get(t3, kc) == -1);
    OK(MPI_Type_delete_attr(t3, ka));
    CHECK(sa.deletes == 2 && sa.deleted == 2011 && get(t3, ka) == -1 && get(t2, ka) == 1011);

    /* Freeing a type deletes what it holds. (Each type is freed before the one it was
     * duplicated from: whether a type's callbacks run at MPI_Type_free or only once no type
     * built from it remains is not something the standard pins down, and MPICH waits.) The
     * dup of the dup holds only B (20). */
    OK(MPI_Type_free(&t3));
    CHECK(t3 == MPI_DATATYPE_NULL);
    CHECK(sb.deletes == 1 && sb.deleted == 20);
    CHECK(sa.deletes == 2 && sc.deletes == 1 && se.deletes == 0);

    /* A freed keyval: the handle is invalidated, and the attributes still cached with it are
     * still deleted when their type is freed. */
    OK(MPI_Type_free_keyval(&kb));
    CHECK(kb == MPI_KEYVAL_INVALID);

    /* The dup holds A (1011), B (20) and C (32); not E. */
    OK(MPI_Type_free(&t2));
    CHECK(t2 == MPI_DATATYPE_NULL);
    CHECK(sa.deletes == 3 && sa.deleted == 1011);
    CHECK(sb.deletes == 2 && sb.deleted == 20);
    CHECK(sc.deletes == 2 && sc.deleted == 32);
    CHECK(se.deletes == 0);

    OK(MPI_Type_free(&t));
    CHECK(sa.deletes == 4 && sa.deleted == 11);
    CHECK(sb.deletes == 3 && sb.deleted == 20);
    CHECK(sc.deletes == 3 && sc.deleted == 31);
    CHECK(se.deletes == 1 && se.deleted == 50);
    CHECK(sa.copies == 2 && se.copies == 1);

    OK(MPI_Type_free_keyval(&ka));
    OK(MPI_Type_free_keyval(&kc));
    OK(MPI_Type_free_keyval(&kd));
    OK(MPI_Type_free_keyval(&ke));
    CHECK(ka == MPI_KEYVAL_INVALID && kc == MPI_KEYVAL_INVALID && kd == MPI_KEYVAL_INVALID);

    /* A keyval made after the others were freed works on a new type. */
    int kf;
    struct state sf = sa;
    sf.copies = sf.deletes = 0;
    OK(MPI_Type_create_keyval(copy_fn, delete_fn, &kf, &sf));
    OK(MPI_Type_vector(2, 1, 3, MPI_DOUBLE, &t));
    CHECK(get(t, kf) == -1);
    OK(MPI_Type_set_attr(t, kf, val(7)));
    CHECK(get(t, kf) == 7);
    OK(MPI_Type_free(&t));
    CHECK(sf.deletes == 1 && sf.deleted == 7 && sf.copies == 0);
    OK(MPI_Type_free_keyval(&kf));

    pass("type_attrs");
    return 0;
}
