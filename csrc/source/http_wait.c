/*
 * source/http_wait.c - how the HTTP source's I/O thread waits for its
 * multi handle: libcurl's socket interface over an epoll set. libcurl
 * says which sockets to watch (socket callback) and when it next needs
 * time (timer callback); a wait is one epoll_wait, and libcurl is then
 * driven for the sockets that are ready and a timer that is due only.
 *
 * Why not curl_multi_poll + curl_multi_perform: they poll every socket
 * and visit every transfer on each wake, a batch has up to max_inflight
 * transfers, and a server slower than nginx sends their answers one by
 * one, a wake each (measured with rclone's S3 server: 4051 wakes for 5830
 * GETs, against 276 with nginx), so that cost per wake grew with the
 * batch. Here a wake costs one epoll_wait and the ready sockets' work.
 *
 * An eventfd in the set ends a wait from another thread (cancel()).
 *
 * A worker's read_one (one transfer, then perhaps a backoff and another)
 * waits on a multi handle of its own with curl_multi_poll, which
 * curl_multi_wakeup ends from another thread: cancel() wakes every
 * read_one on the source's list, so one waiting for a server that sends
 * nothing ends at once instead of after timeout_s x attempts. (An easy
 * handle's curl_easy_perform cannot be woken; its progress callback runs
 * about once a second while nothing arrives.)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "source/http_xfer.h"

static int on_socket(CURL *e, curl_socket_t fd, int what, void *arg,
                     void *sockp)
{
    (void)e;
    (void)sockp;
    http_source *s = arg;
    if (what == CURL_POLL_REMOVE) {
        epoll_ctl(s->epfd, EPOLL_CTL_DEL, fd, NULL);
        return 0;
    }
    struct epoll_event ev = {0};
    ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0) |
                ((what & CURL_POLL_OUT) ? EPOLLOUT : 0);
    ev.data.fd = fd;
    if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, fd, &ev) != 0 && errno == ENOENT) {
        /* A socket not in the set yet. Should this fail (no memory), its
         * transfer sees no progress and ends by its timeout, retried. */
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev);
    }
    return 0;
}

static int on_timer(CURLM *m, long ms, void *arg)
{
    (void)m;
    http_source *s = arg;
    s->timer_ns =
        ms < 0 ? UINT64_MAX : rl__http_now_ns() + (uint64_t)ms * 1000000u;
    return 0;
}

bool rl__http_wait_init(http_source *s)
{
    s->timer_ns = UINT64_MAX;
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->epfd < 0 || s->evfd < 0) {
        return false;
    }
    struct epoll_event ev = {0};
    ev.events = EPOLLIN;
    ev.data.fd = s->evfd;
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->evfd, &ev) != 0) {
        return false;
    }
    curl_multi_setopt(s->multi, CURLMOPT_SOCKETFUNCTION, on_socket);
    curl_multi_setopt(s->multi, CURLMOPT_SOCKETDATA, s);
    curl_multi_setopt(s->multi, CURLMOPT_TIMERFUNCTION, on_timer);
    curl_multi_setopt(s->multi, CURLMOPT_TIMERDATA, s);
    return true;
}

void rl__http_wait_free(http_source *s)
{
    if (s->epfd >= 0) {
        close(s->epfd);
    }
    if (s->evfd >= 0) {
        close(s->evfd);
    }
    s->epfd = s->evfd = -1;
}

void rl__http_wake(http_source *s)
{
    uint64_t one = 1;
    ssize_t w = write(s->evfd, &one, sizeof(one));
    (void)w; /* EAGAIN: the counter is full, a wake is pending anyway */
}

void rl__http_drive(http_source *s)
{
    int still;
    for (int i = 0; i < s->nready; i++) {
        const struct epoll_event *ev = &s->ready[i];
        if (ev->data.fd == s->evfd) {
            uint64_t v;
            ssize_t r = read(s->evfd, &v, sizeof(v));
            (void)r;
            continue;
        }
        int bits = 0;
        if (ev->events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
            bits |= CURL_CSELECT_IN; /* an error or a close is read as one */
        }
        if (ev->events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) {
            bits |= CURL_CSELECT_OUT;
        }
        curl_multi_socket_action(s->multi, ev->data.fd, bits, &still);
    }
    s->nready = 0;
    if (s->timer_ns <= rl__http_now_ns()) {
        s->timer_ns = UINT64_MAX; /* the callback sets the next one */
        curl_multi_socket_action(s->multi, CURL_SOCKET_TIMEOUT, 0, &still);
    }
}

void rl__http_wait(http_source *s, uint64_t until_ns)
{
    if (s->timer_ns < until_ns) {
        until_ns = s->timer_ns;
    }
    uint64_t now = rl__http_now_ns();
    int ms = 0;
    if (until_ns > now) {
        uint64_t d = (until_ns - now + 999999) / 1000000;
        ms = d > 1000 ? 1000 : (int)d;
    }
    int n = epoll_wait(s->epfd, s->ready, RL_HTTP_READY, ms);
    s->nready = n > 0 ? n : 0; /* EINTR: nothing ready */
}

/* ---- a worker's read_one ---- */

bool rl__http_one_init(http_source *s, rl_http_one *o)
{
    o->multi = curl_multi_init();
    if (o->multi == NULL) {
        return false;
    }
    pthread_mutex_lock(&s->mu);
    o->prev = NULL;
    o->next = s->ones;
    if (s->ones != NULL) {
        s->ones->prev = o;
    }
    s->ones = o;
    pthread_mutex_unlock(&s->mu);
    return true;
}

void rl__http_one_exit(http_source *s, rl_http_one *o)
{
    pthread_mutex_lock(&s->mu);
    if (o->prev != NULL) {
        o->prev->next = o->next;
    } else {
        s->ones = o->next;
    }
    if (o->next != NULL) {
        o->next->prev = o->prev;
    }
    pthread_mutex_unlock(&s->mu);
    curl_multi_cleanup(o->multi); /* off the list: no wake can reach it */
}

void rl__http_one_wake_all(http_source *s)
{
    pthread_mutex_lock(&s->mu);
    for (rl_http_one *o = s->ones; o != NULL; o = o->next) {
        curl_multi_wakeup(o->multi);
    }
    pthread_mutex_unlock(&s->mu);
}

static bool cancelled(http_source *s, unsigned gen)
{
    return atomic_load(&s->gen) != gen;
}

bool rl__http_one_perform(http_source *s, rl_http_one *o, CURL *e, unsigned gen,
                          CURLcode *rc)
{
    if (curl_multi_add_handle(o->multi, e) != CURLM_OK) {
        *rc = CURLE_OUT_OF_MEMORY;
        return true;
    }
    bool done = false;
    while (!done && !cancelled(s, gen)) {
        int running = 0;
        CURLMcode mc = curl_multi_perform(o->multi, &running);
        CURLMsg *m;
        int queued;
        while ((m = curl_multi_info_read(o->multi, &queued)) != NULL) {
            if (m->msg == CURLMSG_DONE && m->easy_handle == e) {
                *rc = m->data.result;
                done = true;
            }
        }
        if (!done && (mc != CURLM_OK || running == 0)) {
            /* libcurl itself failed (out of memory): no result will come */
            *rc = CURLE_OUT_OF_MEMORY;
            done = true;
        }
        if (!done) {
            /* Until a socket is ready, curl's timer is due or cancel(). */
            curl_multi_poll(o->multi, NULL, 0, 1000, NULL);
        }
    }
    curl_multi_remove_handle(o->multi, e);
    return done;
}

bool rl__http_one_pause(http_source *s, rl_http_one *o, uint64_t due_ns,
                        unsigned gen)
{
    for (;;) {
        if (cancelled(s, gen)) {
            return false;
        }
        uint64_t now = rl__http_now_ns();
        if (now >= due_ns) {
            return true;
        }
        uint64_t ms = (due_ns - now + 999999) / 1000000;
        /* No transfer is added: this waits for the time or a wake. */
        curl_multi_poll(o->multi, NULL, 0, ms > 1000 ? 1000 : (int)ms, NULL);
    }
}
