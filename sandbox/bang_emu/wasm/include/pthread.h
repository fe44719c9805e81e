/* pthread.h, wasm flavour: declarations only (bang_emu/wasm, issue 37). wasi has no threads, and the wasm build
 * only needs a submission's kernels; host code in a .mlu may still include <pthread.h> and name its types
 * (mlu-ops' core/runtime/device.h, its locks in core/subscriber.hpp). The types are opaque storage, the functions
 * declared and defined nowhere: host code that calls them is dropped by the link with the rest of the host code,
 * and a kernel that calls one fails the link by name ("undefined symbol: pthread_mutex_lock"), as any call the
 * device library does not have. */
#ifndef BANG_WASM_PTHREAD_H_
#define BANG_WASM_PTHREAD_H_
#include <sched.h>
#include <time.h>
#ifdef __cplusplus
extern "C" {
#endif
typedef unsigned long pthread_t;
typedef unsigned pthread_key_t;
typedef int pthread_once_t;
typedef struct { unsigned __opaque[11]; } pthread_attr_t;
typedef struct { unsigned __opaque[6]; } pthread_mutex_t;
typedef struct { unsigned __opaque; } pthread_mutexattr_t;
typedef struct { unsigned __opaque[12]; } pthread_cond_t;
typedef struct { unsigned __opaque; } pthread_condattr_t;
typedef struct { unsigned __opaque[14]; } pthread_rwlock_t;
typedef struct { unsigned __opaque[2]; } pthread_rwlockattr_t;
typedef struct { unsigned __opaque[5]; } pthread_barrier_t;
typedef struct { unsigned __opaque; } pthread_barrierattr_t;
typedef int pthread_spinlock_t;
#define PTHREAD_MUTEX_INITIALIZER {{0}}
#define PTHREAD_RWLOCK_INITIALIZER {{0}}
#define PTHREAD_COND_INITIALIZER {{0}}
#define PTHREAD_ONCE_INIT 0
#define PTHREAD_MUTEX_NORMAL 0
#define PTHREAD_MUTEX_RECURSIVE 1
#define PTHREAD_MUTEX_ERRORCHECK 2
#define PTHREAD_MUTEX_DEFAULT 0
#define PTHREAD_CREATE_JOINABLE 0
#define PTHREAD_CREATE_DETACHED 1
int pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
int pthread_join(pthread_t, void **);
int pthread_detach(pthread_t);
pthread_t pthread_self(void);
int pthread_equal(pthread_t, pthread_t);
void pthread_exit(void *);
int pthread_once(pthread_once_t *, void (*)(void));
int pthread_attr_init(pthread_attr_t *);
int pthread_attr_destroy(pthread_attr_t *);
int pthread_mutex_init(pthread_mutex_t *, const pthread_mutexattr_t *);
int pthread_mutex_destroy(pthread_mutex_t *);
int pthread_mutex_lock(pthread_mutex_t *);
int pthread_mutex_trylock(pthread_mutex_t *);
int pthread_mutex_unlock(pthread_mutex_t *);
int pthread_mutexattr_init(pthread_mutexattr_t *);
int pthread_mutexattr_destroy(pthread_mutexattr_t *);
int pthread_mutexattr_settype(pthread_mutexattr_t *, int);
int pthread_cond_init(pthread_cond_t *, const pthread_condattr_t *);
int pthread_cond_destroy(pthread_cond_t *);
int pthread_cond_wait(pthread_cond_t *, pthread_mutex_t *);
int pthread_cond_timedwait(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
int pthread_cond_signal(pthread_cond_t *);
int pthread_cond_broadcast(pthread_cond_t *);
int pthread_rwlock_init(pthread_rwlock_t *, const pthread_rwlockattr_t *);
int pthread_rwlock_destroy(pthread_rwlock_t *);
int pthread_rwlock_rdlock(pthread_rwlock_t *);
int pthread_rwlock_wrlock(pthread_rwlock_t *);
int pthread_rwlock_tryrdlock(pthread_rwlock_t *);
int pthread_rwlock_trywrlock(pthread_rwlock_t *);
int pthread_rwlock_unlock(pthread_rwlock_t *);
int pthread_key_create(pthread_key_t *, void (*)(void *));
int pthread_key_delete(pthread_key_t);
void *pthread_getspecific(pthread_key_t);
int pthread_setspecific(pthread_key_t, const void *);
int pthread_spin_init(pthread_spinlock_t *, int);
int pthread_spin_destroy(pthread_spinlock_t *);
int pthread_spin_lock(pthread_spinlock_t *);
int pthread_spin_unlock(pthread_spinlock_t *);
#ifdef __cplusplus
}
#endif
#endif
