// datapath_client: the two load generators of bench/datapath.sh that wrk cannot be.
//
//   datapath_client rate --port P --rate R --duration S --body JSON
//                        [--warmup S] [--conns 16] [--path /v1/chat/completions]
//     Open loop: request j is due at start + j/R, on keep-alive connection j mod conns, and
//     its latency counts from that due time, not from when it was sent, so a stall shows
//     as the latency of every request it delayed (no coordinated omission, as in wrk2).
//     Prints `RATE key=value ...`: latency percentiles in µs, and the client's own lag
//     (send time - due time), which says whether the client kept its schedule.
//
//   datapath_client hold --port P --n N --open-rate R --events E --body JSON
//                        [--pid PID] [--timeout 120] [--path /v1/chat/completions]
//     Opens N streams, one connection each, R per second; each must bring a 200 and E SSE
//     events. Per stream: time to first event (from connect()) and the largest gap between
//     two events. VmRSS of PID is read before the first connect and, every 100 ms, while
//     all N streams are open at once (each has its first event, none has ended); the
//     largest reading minus the first, over N, is the memory per held stream.
//     Prints `HOLD key=value ...`; failures by reason on stderr. Exit 1 if any failed.
//
//   datapath_client streams --port P --conns C --duration S --events E --body JSON
//                           [--warmup S] [--path /v1/chat/completions]
//     Closed loop: C keep-alive connections, each sending a stream request as soon as its
//     previous stream ended (all C start together, as a fleet of chat sessions would).
//     Per stream: time to first event and to the end, both from the send of the request.
//     --fresh 1: each stream on a new connection, timed from connect().
//     Prints `STREAMS key=value ...`: percentiles in µs (p50, p90, p99, p99.9, max) and a
//     histogram of time to first event (`ttfe_hist=` upper bounds in µs:count,...).
//
// Every mode: --header 'Name: value' adds one request header (an API key).
//
// One thread, epoll, non-blocking sockets; responses are parsed as they come (status,
// Content-Length or chunked framing, SSE events: a blank line ends an event that had a
// non-comment line).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) { perror("calloc"); exit(1); }
  return p;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}
// Nearest-rank percentile of a sorted array, in µs.
static long pct_us(const int64_t *v, size_t n, double p) {
  if (n == 0) return -1;
  size_t k = (size_t)ceil(p / 100.0 * (double)n);
  if (k < 1) k = 1;
  return (long)(v[k - 1] / 1000);
}

static void arm_abs(int tfd, int64_t at) {
  struct itimerspec its = {0};
  if (at <= 0) at = 1;
  its.it_value.tv_sec = at / 1000000000;
  its.it_value.tv_nsec = at % 1000000000;
  timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

// ---- response parser -------------------------------------------------------------------

enum { R_HEAD, R_LEN, R_EOF, R_SIZE, R_EXT, R_DATA, R_DATA_END, R_TRAILER, R_DONE, R_ERROR };
enum { HEAD_MAX = 4096 };

struct resp {
  int state, status, close, sse;
  char head[HEAD_MAX];
  size_t head_len;
  int64_t remaining;          // Content-Length bytes, or bytes of the current chunk
  int line_len, line_comment, event_has_data, trailer_len;
  int events;
};

static void resp_reset(struct resp *r) {
  r->state = R_HEAD;
  r->status = 0;
  r->close = 0;
  r->sse = 0;
  r->head_len = 0;
  r->remaining = 0;
  r->line_len = r->line_comment = r->event_has_data = r->trailer_len = 0;
  r->events = 0;
}

static const char *hval(const char *head, size_t n, const char *name, size_t *vlen) {
  size_t nl = strlen(name);
  const char *e = head + n, *line = memchr(head, '\n', n);
  while (line && line + 1 < e) {
    const char *s = line + 1, *eol = memchr(s, '\n', (size_t)(e - s));
    if (!eol) break;
    if ((size_t)(eol - s) > nl && strncasecmp(s, name, nl) == 0) {
      const char *v = s + nl, *ve = eol;
      while (v < ve && (*v == ' ' || *v == '\t')) v++;
      while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ')) ve--;
      *vlen = (size_t)(ve - v);
      return v;
    }
    line = eol;
  }
  return NULL;
}

// SSE over the decoded body: returns how many events completed in [p, p+n).
static int sse_feed(struct resp *r, const char *p, size_t n) {
  int done = 0;
  for (size_t i = 0; i < n; i++) {
    char ch = p[i];
    if (ch == '\n') {
      if (r->line_len == 0) {
        if (r->event_has_data) { r->events++; done++; }
        r->event_has_data = 0;
      }
      r->line_len = 0;
      r->line_comment = 0;
    } else if (ch != '\r') {
      if (r->line_len == 0 && ch == ':') r->line_comment = 1;
      if (!r->line_comment) r->event_has_data = 1;
      r->line_len++;
    }
  }
  return done;
}

// Feed received bytes; *events gets the SSE events completed. Returns the bytes used
// (the rest would belong to a next response, which we never pipeline), or -1 on a
// malformed response.
static long resp_feed(struct resp *r, const char *p, size_t n, int *events) {
  size_t i = 0;
  *events = 0;
  while (i < n && r->state != R_DONE) {
    switch (r->state) {
    case R_HEAD: {
      size_t take = n - i, room = HEAD_MAX - r->head_len;
      if (take > room) take = room;
      size_t old = r->head_len;
      memcpy(r->head + old, p + i, take);
      r->head_len += take;
      size_t from = old >= 3 ? old - 3 : 0;
      const char *end = memmem(r->head + from, r->head_len - from, "\r\n\r\n", 4);
      if (!end) {
        if (r->head_len == HEAD_MAX) return -1;
        i += take;
        break;
      }
      size_t hl = (size_t)(end - r->head) + 4, vlen;
      i += hl - old;
      if (hl < 12 || memcmp(r->head, "HTTP/1.", 7) != 0) return -1;
      r->status = atoi(r->head + 9);
      const char *v;
      if ((v = hval(r->head, hl, "connection:", &vlen)) && vlen == 5 && !strncasecmp(v, "close", 5)) r->close = 1;
      if ((v = hval(r->head, hl, "content-type:", &vlen)) && vlen >= 17 && !strncasecmp(v, "text/event-stream", 17))
        r->sse = 1;
      if ((v = hval(r->head, hl, "transfer-encoding:", &vlen)) && vlen >= 7 && !strncasecmp(v + vlen - 7, "chunked", 7)) {
        r->state = R_SIZE;
        r->remaining = 0;
      } else if ((v = hval(r->head, hl, "content-length:", &vlen))) {
        r->remaining = strtoll(v, NULL, 10);
        r->state = r->remaining > 0 ? R_LEN : R_DONE;
      } else {
        r->state = R_EOF;
        r->close = 1;
      }
      break;
    }
    case R_LEN: case R_EOF: case R_DATA: {
      size_t take = n - i;
      if (r->state != R_EOF && (int64_t)take > r->remaining) take = (size_t)r->remaining;
      if (r->sse) *events += sse_feed(r, p + i, take);
      i += take;
      if (r->state == R_EOF) break;
      r->remaining -= (int64_t)take;
      if (r->remaining == 0) r->state = r->state == R_LEN ? R_DONE : R_DATA_END;
      break;
    }
    case R_SIZE: case R_EXT: {
      char ch = p[i++];
      int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
            : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
      if (r->state == R_SIZE && d >= 0) {
        if (r->remaining > (1LL << 40)) return -1;
        r->remaining = r->remaining * 16 + d;
      } else if (ch == '\n') {
        r->state = r->remaining ? R_DATA : R_TRAILER;
        r->trailer_len = 0;
      } else if (ch != '\r') {
        r->state = R_EXT;  // chunk extension: skipped
      }
      break;
    }
    case R_DATA_END: {
      char ch = p[i++];
      if (ch == '\n') { r->state = R_SIZE; r->remaining = 0; }
      else if (ch != '\r') return -1;
      break;
    }
    case R_TRAILER: {
      char ch = p[i++];
      if (ch == '\n') { if (r->trailer_len == 0) r->state = R_DONE; r->trailer_len = 0; }
      else if (ch != '\r') r->trailer_len++;
      break;
    }
    default: return -1;
    }
  }
  return (long)i;
}

// ---- common ----------------------------------------------------------------------------

static struct sockaddr_in target;
static char *request;
static size_t request_len;

static void build_request(const char *host, int port, const char *path, const char *body, const char *header) {
  size_t bl = strlen(body);
  request = xcalloc(1, bl + strlen(path) + strlen(header) + 256);
  request_len = (size_t)sprintf(request, "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                                "%s%sContent-Length: %zu\r\n\r\n%s", path, host, port, header, *header ? "\r\n" : "",
                                bl, body);
  target.sin_family = AF_INET;
  target.sin_port = htons((uint16_t)port);
  if (inet_pton(AF_INET, host, &target.sin_addr) != 1) { fprintf(stderr, "bad host %s\n", host); exit(2); }
}

// A TCP connection to the target, non-blocking once open. blocking_connect: wait for the
// handshake here (the rate mode's few connections, before the clock starts); otherwise
// connect() returns at once and the caller waits for EPOLLOUT.
static int open_socket(int blocking_connect) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (blocking_connect ? 0 : SOCK_NONBLOCK), 0), one = 1;
  if (fd < 0) return -1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, (struct sockaddr *)&target, sizeof target) < 0 && errno != EINPROGRESS) { close(fd); return -1; }
  if (blocking_connect) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

// ---- rate ------------------------------------------------------------------------------

struct rconn {
  int fd, busy;
  int64_t next_due, sched;   // due time of the next request / of the one in flight
  struct resp r;
};

static int rate_main(double rate, double duration, double warmup, int nconns) {
  int ep = epoll_create1(EPOLL_CLOEXEC), tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  struct rconn *cs = xcalloc((size_t)nconns, sizeof *cs);
  for (int i = 0; i < nconns; i++) {
    cs[i].fd = open_socket(1);
    if (cs[i].fd < 0) { perror("connect"); return 2; }
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
  }
  struct epoll_event tev = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
  epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);

  const int64_t period = (int64_t)(1e9 / rate);
  const int64_t t0 = now_ns() + 10000000;  // first request 10 ms from now, after setup
  const int64_t t_meas = t0 + (int64_t)(warmup * 1e9), t_end = t_meas + (int64_t)(duration * 1e9);
  for (int i = 0; i < nconns; i++) cs[i].next_due = t0 + i * period;

  size_t cap = (size_t)(rate * duration * 1.1) + 1024, nlat = 0, nlag = 0;
  int64_t *lat = xcalloc(cap, sizeof *lat), *lag = xcalloc(cap, sizeof *lag);
  long sent = 0, done = 0, errors = 0, in_flight = 0;
  char buf[65536];
  struct epoll_event evs[64];

  for (;;) {
    int64_t now = now_ns();
    // Send every request that is due on an idle connection.
    int64_t wake = INT64_MAX;
    for (int i = 0; i < nconns; i++) {
      struct rconn *c = &cs[i];
      if (c->busy || c->next_due >= t_end) continue;
      if (c->next_due <= now) {
        resp_reset(&c->r);
        ssize_t w = send(c->fd, request, request_len, MSG_NOSIGNAL);
        if (w != (ssize_t)request_len) {  // a fresh request on an idle socket fits; if not, the peer is gone
          errors++;
          close(c->fd);
          c->fd = open_socket(1);
          if (c->fd < 0) { perror("reconnect"); return 2; }
          struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
          epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
          c->next_due += (int64_t)nconns * period;
          i--;  // retry this connection's schedule
          continue;
        }
        c->busy = 1;
        c->sched = c->next_due;
        c->next_due += (int64_t)nconns * period;
        sent++;
        in_flight++;
        if (c->sched >= t_meas && nlag < cap) lag[nlag++] = now - c->sched;
      }
      if (!c->busy && c->next_due < wake) wake = c->next_due;
    }
    if (now >= t_end && in_flight == 0) break;
    if (now >= t_end + 5000000000LL) { errors += in_flight; break; }  // answers 5 s late: give up
    arm_abs(tfd, wake == INT64_MAX ? t_end + 5000000000LL : wake);

    int n = epoll_wait(ep, evs, 64, 1000);
    if (n < 0 && errno != EINTR) { perror("epoll_wait"); return 2; }
    for (int k = 0; k < n; k++) {
      if (evs[k].data.u32 == UINT32_MAX) {
        uint64_t x;
        if (read(tfd, &x, sizeof x) < 0) {}
        continue;
      }
      struct rconn *c = &cs[evs[k].data.u32];
      ssize_t r = recv(c->fd, buf, sizeof buf, 0);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      int64_t t = now_ns();
      int evn;
      if (r <= 0 || !c->busy || resp_feed(&c->r, buf, (size_t)r, &evn) < 0) {
        if (c->busy) { errors++; in_flight--; c->busy = 0; }
        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = open_socket(1);
        if (c->fd < 0) { perror("reconnect"); return 2; }
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = evs[k].data.u32};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
        continue;
      }
      if (c->r.state == R_DONE) {
        c->busy = 0;
        in_flight--;
        done++;
        if (c->r.status != 200) errors++;
        else if (c->sched >= t_meas && nlat < cap) lat[nlat++] = t - c->sched;
        if (c->r.close) {
          epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
          close(c->fd);
          c->fd = open_socket(1);
          if (c->fd < 0) { perror("reconnect"); return 2; }
          struct epoll_event ev = {.events = EPOLLIN, .data.u32 = evs[k].data.u32};
          epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
        }
      }
    }
  }
  qsort(lat, nlat, sizeof *lat, cmp_i64);
  qsort(lag, nlag, sizeof *lag, cmp_i64);
  printf("RATE target_rps=%.0f measured=%zu achieved_rps=%.0f sent=%ld done=%ld errors=%ld "
         "p50_us=%ld p90_us=%ld p99_us=%ld p999_us=%ld max_us=%ld lag_p50_us=%ld lag_p99_us=%ld\n",
         rate, nlat, (double)nlat / duration, sent, done, errors, pct_us(lat, nlat, 50), pct_us(lat, nlat, 90),
         pct_us(lat, nlat, 99), pct_us(lat, nlat, 99.9), nlat ? (long)(lat[nlat - 1] / 1000) : -1,
         pct_us(lag, nlag, 50), pct_us(lag, nlag, 99));
  return errors ? 1 : 0;
}

// ---- hold ------------------------------------------------------------------------------

enum { H_CONNECTING, H_SENDING, H_READING, H_ENDED };

struct hconn {
  int fd, state, first;
  size_t sent;
  int64_t t_open, t_first, t_last, max_gap;
  struct resp r;
};

static long rss_kib(int pid) {
  if (pid <= 0) return -1;
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  long v = -1;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) { v = strtol(line + 6, NULL, 10); break; }
  fclose(f);
  return v;
}

static const char *reasons[64];
static long reason_count[64];
static void fail(const char *why) {
  for (int i = 0; i < 64; i++) {
    if (!reasons[i]) reasons[i] = why;
    if (!strcmp(reasons[i], why)) { reason_count[i]++; return; }
  }
}

static int hold_main(int n, double open_rate, int expect_events, int pid, double timeout) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int open_tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  int sample_tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  enum { TAG_OPEN = -1, TAG_SAMPLE = -2 };
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)(int64_t)TAG_OPEN};
  epoll_ctl(ep, EPOLL_CTL_ADD, open_tfd, &ev);
  ev.data.u64 = (uint64_t)(int64_t)TAG_SAMPLE;
  epoll_ctl(ep, EPOLL_CTL_ADD, sample_tfd, &ev);

  struct hconn *cs = xcalloc((size_t)n, sizeof *cs);
  long rss_idle = rss_kib(pid), rss_held = -1, rss_at_peak = -1;
  int opened = 0, ended = 0, ok = 0, held = 0, peak = 0, peak_sampled = -1, all_held = 0;
  const int64_t t0 = now_ns(), deadline = t0 + (int64_t)(timeout * 1e9);
  int64_t t_all_open = 0;
  const int64_t period = (int64_t)(1e9 / open_rate) > 0 ? (int64_t)(1e9 / open_rate) : 1;
  struct itimerspec its = {.it_value = {0, 1}, .it_interval = {period / 1000000000, period % 1000000000}};
  timerfd_settime(open_tfd, 0, &its, NULL);
  struct itimerspec sits = {.it_value = {0, 100000000}, .it_interval = {0, 100000000}};
  timerfd_settime(sample_tfd, 0, &sits, NULL);

  char buf[65536];
  struct epoll_event evs[256];
  while (ended < n) {
    int64_t now = now_ns();
    if (now >= deadline) break;
    int ne = epoll_wait(ep, evs, 256, 100);
    if (ne < 0 && errno != EINTR) { perror("epoll_wait"); return 2; }
    for (int k = 0; k < ne; k++) {
      int64_t tag = (int64_t)evs[k].data.u64;
      if (tag == TAG_OPEN) {
        uint64_t x = 0;
        if (read(open_tfd, &x, sizeof x) < 0) x = 0;
        for (uint64_t j = 0; j < x && opened < n; j++) {
          struct hconn *c = &cs[opened];
          c->t_open = now_ns();
          c->fd = open_socket(0);
          if (c->fd < 0) { fail("connect"); c->state = H_ENDED; ended++; opened++; continue; }
          c->state = H_CONNECTING;
          resp_reset(&c->r);
          struct epoll_event e = {.events = EPOLLOUT, .data.u64 = (uint64_t)opened};
          epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &e);
          opened++;
        }
        if (opened == n && !t_all_open) {
          t_all_open = now_ns();
          struct itimerspec off = {0};
          timerfd_settime(open_tfd, 0, &off, NULL);
        }
        continue;
      }
      if (tag == TAG_SAMPLE) {
        uint64_t x;
        if (read(sample_tfd, &x, sizeof x) < 0) {}
        if (held == n) {
          long v = rss_kib(pid);
          if (v > rss_held) rss_held = v;
          all_held = 1;
        } else if (held > peak_sampled && !all_held) {
          // In case N never are open together: the reading at the most streams seen.
          rss_at_peak = rss_kib(pid);
          peak_sampled = held;
        }
        continue;
      }
      struct hconn *c = &cs[tag];
      if (c->state == H_ENDED) continue;
      int64_t t = now_ns();
      if (c->state == H_CONNECTING || c->state == H_SENDING) {
        if (c->state == H_CONNECTING) {
          int err = 0;
          socklen_t el = sizeof err;
          getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el);
          if (err) { fail("connect"); goto end_conn; }
          c->state = H_SENDING;
        }
        ssize_t w = send(c->fd, request + c->sent, request_len - c->sent, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN) { fail("send"); goto end_conn; }
        if (w > 0) c->sent += (size_t)w;
        if (c->sent == request_len) {
          c->state = H_READING;
          struct epoll_event e = {.events = EPOLLIN, .data.u64 = (uint64_t)tag};
          epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e);
        }
        continue;
      }
      for (;;) {
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (r <= 0) { fail(c->first ? "closed after first event" : "closed before first event"); goto end_conn; }
        int evn = 0;
        long used = resp_feed(&c->r, buf, (size_t)r, &evn);
        if (used < 0) { fail("malformed response"); goto end_conn; }
        if (c->r.state != R_HEAD && c->r.status != 200) { fail("status not 200"); goto end_conn; }
        if (evn > 0) {
          if (!c->first) {
            c->first = 1;
            c->t_first = c->t_last = t;
            held++;
            if (held > peak) peak = held;
            if (held == n) {  // all N open together: read now, the sampler adds more readings
              long v = rss_kib(pid);
              if (v > rss_held) rss_held = v;
              all_held = 1;
            }
          } else {
            if (t - c->t_last > c->max_gap) c->max_gap = t - c->t_last;
            c->t_last = t;
          }
        }
        if (c->r.state == R_DONE) {
          if (c->r.events == expect_events) ok++;
          else fail("wrong event count");
          goto end_conn;
        }
        if ((size_t)r < sizeof buf) break;
      }
      continue;
    end_conn:
      if (c->first) held--;
      epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
      close(c->fd);
      c->state = H_ENDED;
      ended++;
    }
  }
  int64_t t_end = now_ns();
  for (int i = 0; i < n; i++)
    if (i >= opened || cs[i].state != H_ENDED) { fail(i >= opened ? "not opened (timeout)" : "timeout"); }

  int64_t *ttfe = xcalloc((size_t)n, sizeof *ttfe), *gap = xcalloc((size_t)n, sizeof *gap);
  size_t nt = 0, ng = 0;
  for (int i = 0; i < opened; i++) {
    if (!cs[i].first) continue;
    ttfe[nt++] = cs[i].t_first - cs[i].t_open;
    if (cs[i].r.events >= 2) gap[ng++] = cs[i].max_gap;
  }
  qsort(ttfe, nt, sizeof *ttfe, cmp_i64);
  qsort(gap, ng, sizeof *gap, cmp_i64);
  long with = all_held ? rss_held : rss_at_peak;
  int with_n = all_held ? n : peak_sampled;
  double per = (with >= 0 && rss_idle >= 0 && with_n > 0) ? (double)(with - rss_idle) / with_n : -1;
  int failed = n - ok;
  printf("HOLD n=%d ok=%d failed=%d ttfe_p50_us=%ld ttfe_p99_us=%ld ttfe_max_us=%ld gap_p50_us=%ld gap_p99_us=%ld "
         "gap_max_us=%ld rss_idle_kib=%ld rss_held_kib=%ld held_together=%d kib_per_stream=%.2f open_s=%.2f total_s=%.2f\n",
         n, ok, failed, pct_us(ttfe, nt, 50), pct_us(ttfe, nt, 99), nt ? (long)(ttfe[nt - 1] / 1000) : -1,
         pct_us(gap, ng, 50), pct_us(gap, ng, 99), ng ? (long)(gap[ng - 1] / 1000) : -1, rss_idle, with, with_n, per,
         t_all_open ? (double)(t_all_open - t0) / 1e9 : -1.0, (double)(t_end - t0) / 1e9);
  if (!all_held)
    fprintf(stderr, "hold: the %d streams were never all open at once (at most %d): streams end before the last "
            "one opens; RSS per stream is taken at %d streams\n", n, peak, with_n);
  for (int i = 0; i < 64 && reasons[i]; i++) fprintf(stderr, "hold: %ld streams failed: %s\n", reason_count[i], reasons[i]);
  return failed ? 1 : 0;
}

// ---- streams ---------------------------------------------------------------------------

struct sconn {
  int fd, first;
  int64_t t_send;
  struct resp r;
};

static int fresh_conns;  // --fresh 1: every stream on a new connection, timed from connect()

static int streams_send(int ep, uint32_t idx, struct sconn *c) {
  resp_reset(&c->r);
  c->first = 0;
  c->t_send = now_ns();
  if (fresh_conns) {
    if (c->fd >= 0) close(c->fd);  // leaves epoll with it
    c->fd = open_socket(1);
    if (c->fd < 0) return -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = idx};
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
  }
  return send(c->fd, request, request_len, MSG_NOSIGNAL) == (ssize_t)request_len ? 0 : -1;
}

static int streams_main(int nconns, double duration, double warmup, int expect_events) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct sconn *cs = xcalloc((size_t)nconns, sizeof *cs);
  for (int i = 0; i < nconns; i++) {
    cs[i].fd = open_socket(1);
    if (cs[i].fd < 0) { perror("connect"); return 2; }
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    epoll_ctl(ep, EPOLL_CTL_ADD, cs[i].fd, &ev);
  }
  const int64_t t0 = now_ns(), t_meas = t0 + (int64_t)(warmup * 1e9), t_end = t_meas + (int64_t)(duration * 1e9);
  size_t cap = 1 << 20, nt = 0, nw = 0;
  int64_t *ttfe = xcalloc(cap, sizeof *ttfe), *whole = xcalloc(cap, sizeof *whole);
  long errors = 0, active = 0, done = 0;
  for (int i = 0; i < nconns; i++) {
    if (streams_send(ep, (uint32_t)i, &cs[i]) < 0) { perror("send"); return 2; }
    active++;
  }
  char buf[65536];
  struct epoll_event evs[256];
  while (active > 0) {
    int n = epoll_wait(ep, evs, 256, 1000);
    if (n < 0 && errno != EINTR) { perror("epoll_wait"); return 2; }
    if (now_ns() > t_end + 10000000000LL) { errors += active; break; }  // 10 s late: give up
    for (int k = 0; k < n; k++) {
      struct sconn *c = &cs[evs[k].data.u32];
      if (c->fd < 0) continue;
      ssize_t r = recv(c->fd, buf, sizeof buf, 0);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      int64_t t = now_ns();
      int evn = 0;
      if (r <= 0 || resp_feed(&c->r, buf, (size_t)r, &evn) < 0 || (c->r.state != R_HEAD && c->r.status != 200)) {
        errors++;
        goto next;
      }
      if (evn > 0 && !c->first) {
        c->first = 1;
        if (c->t_send >= t_meas && c->t_send < t_end && nt < cap) ttfe[nt++] = t - c->t_send;
      }
      if (c->r.state != R_DONE) continue;
      done++;
      if (c->r.events != expect_events) errors++;
      else if (c->t_send >= t_meas && c->t_send < t_end && nw < cap) whole[nw++] = t - c->t_send;
      if (c->r.close) goto next;
      if (t < t_end && streams_send(ep, evs[k].data.u32, c) == 0) continue;
    next:
      // The loop ends with the measurement; a connection in error is replaced once.
      epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
      close(c->fd);
      c->fd = -1;
      if (t < t_end) {
        c->fd = open_socket(1);
        if (c->fd < 0) { perror("reconnect"); return 2; }
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = evs[k].data.u32};
        epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
        if (streams_send(ep, evs[k].data.u32, c) == 0) continue;
        errors++;
        close(c->fd);
        c->fd = -1;
      }
      active--;
    }
  }
  qsort(ttfe, nt, sizeof *ttfe, cmp_i64);
  qsort(whole, nw, sizeof *whole, cmp_i64);
  printf("STREAMS conns=%d measured=%zu done=%ld errors=%ld streams_per_s=%.1f "
         "ttfe_p50_us=%ld ttfe_p90_us=%ld ttfe_p99_us=%ld ttfe_p999_us=%ld ttfe_max_us=%ld "
         "whole_p50_us=%ld whole_p99_us=%ld whole_max_us=%ld ttfe_hist=",
         nconns, nw, done, errors, (double)nw / duration, pct_us(ttfe, nt, 50), pct_us(ttfe, nt, 90),
         pct_us(ttfe, nt, 99), pct_us(ttfe, nt, 99.9), nt ? (long)(ttfe[nt - 1] / 1000) : -1,
         pct_us(whole, nw, 50), pct_us(whole, nw, 99), nw ? (long)(whole[nw - 1] / 1000) : -1);
  // Histogram of time to first event: the distribution, not one percentile.
  static const long bounds[] = {250, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, -1};
  size_t j = 0;
  for (int b = 0; b < (int)(sizeof bounds / sizeof *bounds); b++) {
    size_t cnt = 0;
    while (j < nt && (bounds[b] < 0 || ttfe[j] / 1000 < bounds[b])) { cnt++; j++; }
    if (b) printf(",");
    if (bounds[b] < 0) printf("inf:%zu", cnt);
    else printf("%ld:%zu", bounds[b], cnt);
  }
  printf("\n");
  return errors ? 1 : 0;
}

// ---- main ------------------------------------------------------------------------------

static void usage(void) {
  fprintf(stderr,
          "usage: datapath_client rate --port P --rate R --duration S --body JSON [--warmup S] [--conns 16] [--path P]\n"
          "       datapath_client hold --port P --n N --open-rate R --events E --body JSON [--pid PID] [--timeout 120]"
          " [--path P]\n"
          "       datapath_client streams --port P --conns C --duration S --events E --body JSON [--warmup S]"
          " [--fresh 0|1] [--path P]\n");
  exit(2);
}

int main(int argc, char **argv) {
  if (argc < 2) usage();
  const char *mode = argv[1], *body = NULL, *path = "/v1/chat/completions", *host = "127.0.0.1", *header = "";
  int port = 0, conns = 16, n = 0, events = 0, pid = 0;
  double rate = 0, duration = 0, warmup = 0, open_rate = 0, timeout = 120;
  for (int i = 2; i < argc; i += 2) {
    if (i + 1 >= argc) usage();
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--port")) port = atoi(v);
    else if (!strcmp(k, "--host")) host = v;
    else if (!strcmp(k, "--path")) path = v;
    else if (!strcmp(k, "--body")) body = v;
    else if (!strcmp(k, "--header")) header = v;
    else if (!strcmp(k, "--rate")) rate = atof(v);
    else if (!strcmp(k, "--duration")) duration = atof(v);
    else if (!strcmp(k, "--warmup")) warmup = atof(v);
    else if (!strcmp(k, "--conns")) conns = atoi(v);
    else if (!strcmp(k, "--n")) n = atoi(v);
    else if (!strcmp(k, "--open-rate")) open_rate = atof(v);
    else if (!strcmp(k, "--events")) events = atoi(v);
    else if (!strcmp(k, "--pid")) pid = atoi(v);
    else if (!strcmp(k, "--timeout")) timeout = atof(v);
    else if (!strcmp(k, "--fresh")) fresh_conns = atoi(v);
    else usage();
  }
  if (port <= 0 || !body) usage();
  signal(SIGPIPE, SIG_IGN);
  // Timers fire on time rather than up to 50 µs late: the schedule is part of the measurement.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  build_request(host, port, path, body, header);
  if (!strcmp(mode, "rate")) {
    if (rate <= 0 || duration <= 0 || conns <= 0) usage();
    return rate_main(rate, duration, warmup, conns);
  }
  if (!strcmp(mode, "hold")) {
    if (n <= 0 || open_rate <= 0 || events <= 0) usage();
    return hold_main(n, open_rate, events, pid, timeout);
  }
  if (!strcmp(mode, "streams")) {
    if (conns <= 0 || duration <= 0 || events <= 0) usage();
    return streams_main(conns, duration, warmup, events);
  }
  usage();
}
