/* client.h: what the files of _gpukv.Client share (not a public interface): the methods its
 * type's table lists, and helpers. The type, its lifecycle and locking are in client_type.c;
 * calls that move a value's bytes in client_values.c; keys, sizes, listing and server calls in
 * client_keys.c; map and create in client_map.c; watches in client_watch.c; registered buffers
 * in client_buffer.c. */
#ifndef GKV_PY_CLIENT_H
#define GKV_PY_CLIENT_H

#include "module.h"

/* Runs expr (a libgpukv call) with the GIL released. */
#define NOGIL(rc, expr)                                                                            \
    do {                                                                                           \
        Py_BEGIN_ALLOW_THREADS rc = (expr);                                                        \
        Py_END_ALLOW_THREADS                                                                       \
    } while (0)

/* Runs expr, a libgpukv call on self->c that returns 0 (or a count) or a negative code, as one
 * call on the client: entered with enter (client_enter or client_enter_map), the GIL released
 * around expr, left. rc gets expr's result; whenever it is negative (entering failed, or expr)
 * the exception is set. */
#define CLIENT_CALL(enter, self, rc, expr)                                                         \
    do {                                                                                           \
        rc = enter(self);                                                                          \
        if (rc == 0) {                                                                             \
            NOGIL(rc, expr);                                                                       \
            client_leave(self);                                                                    \
            if (rc < 0)                                                                            \
                raise_client(self, (int)rc);                                                       \
        }                                                                                          \
    } while (0)

/* Raises ConnectionClosed ("the client is closed"); returns NULL. */
PyObject *raise_closed(void);
/* nx/xx/meta keywords into SET options; *meta_view (set when *has_meta) must be released. */
int set_opts_get(PyObject *nx, PyObject *xx, PyObject *meta, gkv_set_opts_t *o,
                 Py_buffer *meta_view, bool *has_meta);
/* The bytes of a prefix argument, like key_get's but may be empty (client_keys.c). */
int prefix_get(PyObject *obj, key_arg_t *k);
/* The Value struct sequence type (client_values.c), readied at module init. */
int value_type_ready(PyObject *module);

/* The methods, by file. Each takes the client (borrowed) and returns a new reference or NULL
 * with an exception set. */
PyObject *client_set(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *client_set_from_device(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *client_set_many_from_device(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *client_get(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames);
PyObject *client_get_value(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames);
PyObject *client_get_into(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *client_get_to_device(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *client_mget(ClientObject *self, PyObject *args);
PyObject *client_buffer_register(ClientObject *self, PyObject *args);
PyObject *client_buffer_drop(ClientObject *self, PyObject *arg);
PyObject *client_get_to_buffer(ClientObject *self, PyObject *args, PyObject *kw);

PyObject *client_exists(ClientObject *self, PyObject *keys);
PyObject *client_delete(ClientObject *self, PyObject *keys);
PyObject *client_getsize(ClientObject *self, PyObject *key);
PyObject *client_getsize_prefix(ClientObject *self, PyObject *prefix);
PyObject *client_locate(ClientObject *self, PyObject *key);
PyObject *client_tier(ClientObject *self, PyObject *key);
PyObject *client_move(ClientObject *self, PyObject *args);
PyObject *client_flush(ClientObject *self, PyObject *noargs);
PyObject *client_save(ClientObject *self, PyObject *noargs);
PyObject *client_expire(ClientObject *self, PyObject *args);
PyObject *client_persist(ClientObject *self, PyObject *args);
PyObject *client_pttl(ClientObject *self, PyObject *args);
PyObject *client_delete_prefix(ClientObject *self, PyObject *args);
PyObject *client_info_text(ClientObject *self, PyObject *args);
PyObject *client_list(ClientObject *self, PyObject *args);

PyObject *client_map(ClientObject *self, PyObject *const *args, Py_ssize_t nargs,
                     PyObject *kwnames);
PyObject *client_create(ClientObject *self, PyObject *args, PyObject *kw);
PyObject *client_map_many(ClientObject *self, PyObject *args);

PyObject *client_watch(ClientObject *self, PyObject *args);
PyObject *client_watch_next(ClientObject *self, PyObject *timeout_ms);
PyObject *client_unwatch(ClientObject *self, PyObject *noargs);

#endif
