// sse_upstream: the upstream of bench/datapath.sh. A small HTTP/1.1 keep-alive server that
// answers chat completions the way an OpenAI-compatible server does, at a cost far below
// any proxy's, so that in front of it the proxy is what is measured.
//
//   sse_upstream --port P [--host 127.0.0.1] [--events 21] [--delay-ms 0]
//
// Any method and path (GET /healthz answers "ok"). A request whose body has "stream":true
// gets Content-Type: text/event-stream, Transfer-Encoding: chunked, and EVENTS data events
// (chat.completion.chunk: a role chunk, content chunks, a finish_reason chunk, then
// `data: [DONE]`), each event one chunk written by its own send(), as a token-by-token
// server does. With "include_usage":true in the body (what a gateway adds to meter
// streams) a usage chunk follows the finish chunk and the other chunks carry
// "usage":null, as OpenAI does. Other requests get a chat.completion JSON with
// Content-Length, head and body in one send().
//
// Per request, `events=N` and `delay_ms=D` anywhere in the request line or body (e.g. in
// the prompt, which every proxy forwards unchanged) override --events and --delay-ms.
// `whole=1` (without a delay): the head and every event of the answer go out in one
// send(), as a loaded inference server or a cache delivers a short answer in one read.
// With a delay, events 1..N-1 go out D ms apart; the usage chunk, [DONE] and the last
// chunk follow the finish chunk at once, as a server sends them once generation ends.
// Delays come from one timer heap and a timerfd in the epoll loop: one thread, no sleeps.
//
// What a slow reader cannot take stays in a per-connection output buffer until EPOLLOUT;
// events due meanwhile are appended to it (the generation does not wait for the reader).
// SIGTERM or SIGINT: exit 0.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

enum { IN_CAP0 = 4096, IN_MAX = 1 << 20, MAX_EVENTS = 1000000 };

struct conn {
  int fd;
  char *in;                  // request bytes not yet answered
  size_t in_len, in_cap;
  char *out;                 // bytes the kernel did not take yet, from out_off
  size_t out_off, out_len, out_cap;
  int streaming;             // a stream is being sent: later requests wait in `in`
  int next;                  // next event to send, 0-based
  int events;                // data events in this stream, [DONE] included
  int usage;                 // include_usage: usage chunk and "usage":null
  int whole;                 // whole=1: head and every event of the answer in one send()
  int close_after;           // the client sent Connection: close
  int want_out;              // EPOLLOUT is armed
  int dead;                  // to be closed once the current handler returns
  int64_t delay_ns, due;     // delayed streams: when the next event is due
  int heap_idx;              // position in the timer heap, -1 if not in it
};

static int ep, tfd;
static int default_events = 21;
static int64_t default_delay_ns = 0;
static struct conn **heap;   // min-heap on due: the delayed streams waiting for their next event
static size_t heap_len, heap_cap;
static int64_t armed = -1;   // due time the timerfd is set to, -1 = disarmed

static char *ev_role[2], *ev_content[2], *ev_finish[2], *ev_done, *ev_last, *json_reply;
static size_t ev_role_len[2], ev_content_len[2], ev_finish_len[2], ev_done_len, ev_last_len, json_reply_len;

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p) { perror("malloc"); exit(1); }
  return p;
}
static void *xrealloc(void *p, size_t n) {
  p = realloc(p, n);
  if (!p) { perror("realloc"); exit(1); }
  return p;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// One SSE event as one HTTP chunk: size line, "data: JSON\n\n", CRLF. Rendered once at
// start so that sending an event is a single send() of static bytes.
static char *chunk(const char *data, size_t *len) {
  char ev[2048], *out;
  int n = snprintf(ev, sizeof ev, "data: %s\n\n", data);
  out = xmalloc((size_t)n + 32);
  *len = (size_t)sprintf(out, "%x\r\n%s\r\n", n, ev);
  return out;
}

#define CHUNK_HEAD "{\"id\":\"chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG\",\"object\":\"chat.completion.chunk\"," \
  "\"created\":1741570283,\"model\":\"gpt-4o-mini-2024-07-18\",\"service_tier\":\"default\"," \
  "\"system_fingerprint\":\"fp_06737a9306\",\"choices\":"

static void render(void) {
  static const char *usage_tail[2] = {"}", ",\"usage\":null}"};
  char buf[2048];
  for (int u = 0; u < 2; u++) {
    snprintf(buf, sizeof buf, CHUNK_HEAD "[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\","
             "\"refusal\":null},\"logprobs\":null,\"finish_reason\":null}]%s", usage_tail[u]);
    ev_role[u] = chunk(buf, &ev_role_len[u]);
    snprintf(buf, sizeof buf, CHUNK_HEAD "[{\"index\":0,\"delta\":{\"content\":\" token\"},\"logprobs\":null,"
             "\"finish_reason\":null}]%s", usage_tail[u]);
    ev_content[u] = chunk(buf, &ev_content_len[u]);
    snprintf(buf, sizeof buf, CHUNK_HEAD "[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]%s",
             usage_tail[u]);
    ev_finish[u] = chunk(buf, &ev_finish_len[u]);
  }
  ev_done = chunk("[DONE]", &ev_done_len);
  ev_last = "0\r\n\r\n";
  ev_last_len = 5;
  const char *body =
      "{\"id\":\"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT\",\"object\":\"chat.completion\",\"created\":1741569952,"
      "\"model\":\"gpt-4o-mini-2024-07-18\",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
      "\"content\":\"Hello! How can I assist you today?\",\"refusal\":null,\"annotations\":[]},\"logprobs\":null,"
      "\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":19,\"completion_tokens\":10,\"total_tokens\":29,"
      "\"prompt_tokens_details\":{\"cached_tokens\":0,\"audio_tokens\":0},\"completion_tokens_details\":"
      "{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}},"
      "\"service_tier\":\"default\",\"system_fingerprint\":\"fp_06737a9306\"}";
  json_reply = xmalloc(strlen(body) + 128);
  json_reply_len = (size_t)sprintf(json_reply, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                   "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
}

// ---- timer heap ------------------------------------------------------------------------

static void heap_swap(size_t a, size_t b) {
  struct conn *t = heap[a];
  heap[a] = heap[b];
  heap[b] = t;
  heap[a]->heap_idx = (int)a;
  heap[b]->heap_idx = (int)b;
}
static void heap_up(size_t i) {
  while (i > 0 && heap[(i - 1) / 2]->due > heap[i]->due) { heap_swap(i, (i - 1) / 2); i = (i - 1) / 2; }
}
static void heap_down(size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < heap_len && heap[l]->due < heap[m]->due) m = l;
    if (r < heap_len && heap[r]->due < heap[m]->due) m = r;
    if (m == i) return;
    heap_swap(i, m);
    i = m;
  }
}
static void heap_push(struct conn *c) {
  if (heap_len == heap_cap) {
    heap_cap = heap_cap ? 2 * heap_cap : 1024;
    heap = xrealloc(heap, heap_cap * sizeof *heap);
  }
  heap[heap_len] = c;
  c->heap_idx = (int)heap_len++;
  heap_up(heap_len - 1);
}
static void heap_remove(struct conn *c) {
  size_t i = (size_t)c->heap_idx;
  c->heap_idx = -1;
  if (--heap_len == i) return;
  heap[i] = heap[heap_len];
  heap[i]->heap_idx = (int)i;
  heap_up(i);
  heap_down((size_t)heap[i]->heap_idx);
}

// Point the timerfd at the earliest due event; only when that changes, so a busy stream
// set costs one timerfd_settime per wake-up, not one per event.
static void arm_timer(void) {
  int64_t want = heap_len ? heap[0]->due : -1;
  if (want == armed) return;
  struct itimerspec its = {0};
  if (want >= 0) {
    its.it_value.tv_sec = want / 1000000000;
    its.it_value.tv_nsec = want % 1000000000;
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;  // 0 disarms
  }
  if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL) < 0) { perror("timerfd_settime"); exit(1); }
  armed = want;
}

// ---- output ----------------------------------------------------------------------------

static void set_want_out(struct conn *c, int on) {
  if (c->want_out == on) return;
  struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c};
  if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev) < 0) { c->dead = 1; return; }
  c->want_out = on;
}

static void append_out(struct conn *c, const char *p, size_t n) {
  if (c->out_off > 0 && c->out_off == c->out_len) c->out_off = c->out_len = 0;
  if (c->out_len + n > c->out_cap) {
    if (c->out_off > 0) {  // reclaim what was sent before growing
      memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
      c->out_len -= c->out_off;
      c->out_off = 0;
    }
    if (c->out_len + n > c->out_cap) {
      c->out_cap = c->out_len + n > 2 * c->out_cap ? c->out_len + n : 2 * c->out_cap;
      c->out = xrealloc(c->out, c->out_cap);
    }
  }
  memcpy(c->out + c->out_len, p, n);
  c->out_len += n;
}

// One send() per call while the kernel keeps up; behind a backlog, queue in order.
static void send_bytes(struct conn *c, const char *p, size_t n) {
  if (c->dead) return;
  if (c->out_len > c->out_off || c->whole) { append_out(c, p, n); return; }
  ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
  if (w < 0) {
    if (errno != EAGAIN && errno != EWOULDBLOCK) { c->dead = 1; return; }
    w = 0;
  }
  if ((size_t)w < n) {
    append_out(c, p + w, n - (size_t)w);
    set_want_out(c, 1);
  }
}

static void flush_out(struct conn *c) {
  while (c->out_len > c->out_off) {
    ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      c->dead = 1;
      return;
    }
    c->out_off += (size_t)w;
  }
  c->out_off = c->out_len = 0;
  set_want_out(c, 0);
}

// ---- streams ---------------------------------------------------------------------------

static void handle_input(struct conn *c);

// The caller answers a request pipelined behind the stream, if any (handle_input, which
// must not be re-entered from its own start_stream).
static void end_stream(struct conn *c) {
  c->streaming = 0;
  if (c->close_after && c->out_len == c->out_off) c->dead = 1;
}

// Send event c->next; after the finish chunk, the rest of the stream goes out at once.
static void send_event(struct conn *c) {
  int k = c->next++, u = c->usage;
  if (k == 0) {
    send_bytes(c, ev_role[u], ev_role_len[u]);
  } else if (k < c->events - 2) {
    send_bytes(c, ev_content[u], ev_content_len[u]);
  } else {
    send_bytes(c, ev_finish[u], ev_finish_len[u]);
    if (u) {
      char data[512], ev[640];
      int n = c->events - 3;  // content chunks = completion tokens
      snprintf(data, sizeof data, CHUNK_HEAD "[],\"usage\":{\"prompt_tokens\":19,\"completion_tokens\":%d,"
               "\"total_tokens\":%d,\"prompt_tokens_details\":{\"cached_tokens\":0,\"audio_tokens\":0},"
               "\"completion_tokens_details\":{\"reasoning_tokens\":0,\"audio_tokens\":0,"
               "\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}", n, 19 + n);
      int len = snprintf(ev, sizeof ev, "%zx\r\ndata: %s\n\n\r\n", strlen(data) + 8, data);
      send_bytes(c, ev, (size_t)len);
    }
    send_bytes(c, ev_done, ev_done_len);
    send_bytes(c, ev_last, ev_last_len);
    c->next = c->events;
  }
}

static void start_stream(struct conn *c) {
  static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n";
  static const char head_close[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                                   "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  if (c->close_after) send_bytes(c, head_close, sizeof head_close - 1);
  else send_bytes(c, head, sizeof head - 1);
  c->streaming = 1;
  c->next = 0;
  if (c->delay_ns == 0) {
    while (c->next < c->events && !c->dead) send_event(c);
    if (c->whole) {  // what a cache or a fast model behind a busy server delivers: one write
      c->whole = 0;
      flush_out(c);
      if (c->out_len > c->out_off) set_want_out(c, 1);
    }
    end_stream(c);
    return;
  }
  send_event(c);
  c->due = now_ns() + c->delay_ns;
  heap_push(c);
}

// A connection found dead (peer gone, send error, closed after its answer) leaves epoll and
// the timer heap at once; its memory is freed after the current epoll batch, which may
// still hold an event naming it (handlers skip dead connections).
static struct conn **graveyard;
static size_t graveyard_len, graveyard_cap;

static void bury(struct conn *c) {
  if (c->dead != 1) return;
  c->dead = 2;
  epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
  if (c->heap_idx >= 0) heap_remove(c);
  if (graveyard_len == graveyard_cap) {
    graveyard_cap = graveyard_cap ? 2 * graveyard_cap : 256;
    graveyard = xrealloc(graveyard, graveyard_cap * sizeof *graveyard);
  }
  graveyard[graveyard_len++] = c;
}

static void on_timer(void) {
  uint64_t expirations;
  if (read(tfd, &expirations, sizeof expirations) < 0 && errno != EAGAIN) { perror("read timerfd"); exit(1); }
  armed = -1;  // a fired absolute timer is disarmed
  int64_t now = now_ns();
  while (heap_len && heap[0]->due <= now) {
    struct conn *c = heap[0];
    send_event(c);
    if (c->dead) {
      bury(c);
    } else if (c->next < c->events) {
      // The schedule, not the wake-up, sets the next event: a late wake-up does not
      // stretch the stream.
      c->due += c->delay_ns;
      heap_down(0);
    } else {
      heap_remove(c);
      end_stream(c);
      if (!c->dead) handle_input(c);  // may start the next (pipelined) stream
      bury(c);
    }
  }
}

// ---- requests --------------------------------------------------------------------------

static const char *find(const char *h, size_t hn, const char *needle) {
  return memmem(h, hn, needle, strlen(needle));
}

// "key": then optional blanks, then `true`.
static int json_true(const char *p, size_t n, const char *key) {
  const char *e = p + n;
  for (const char *q = find(p, n, key); q; q = find(q + 1, (size_t)(e - q - 1), key)) {
    const char *v = q + strlen(key);
    while (v < e && (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r')) v++;
    if (v < e && *v == ':') v++; else continue;
    while (v < e && (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r')) v++;
    if (e - v >= 4 && memcmp(v, "true", 4) == 0) return 1;
  }
  return 0;
}

// `key` followed by a decimal number, e.g. events=100; -1 if absent.
static long knob(const char *p, size_t n, const char *key) {
  const char *q = find(p, n, key);
  if (!q) return -1;
  const char *v = q + strlen(key), *e = p + n;
  long x = 0;
  if (v >= e || *v < '0' || *v > '9') return -1;
  while (v < e && *v >= '0' && *v <= '9' && x < 100000000) x = x * 10 + (*v++ - '0');
  return x;
}

// Value of header `name` (lower case, with the colon) in the head [p, p+n), or NULL.
static const char *header(const char *p, size_t n, const char *name, size_t *vlen) {
  size_t nl = strlen(name);
  const char *e = p + n, *line = memchr(p, '\n', n);
  while (line && line + 1 < e) {
    const char *s = line + 1, *eol = memchr(s, '\n', (size_t)(e - s));
    if (!eol) break;
    if ((size_t)(eol - s) > nl && strncasecmp(s, name, nl) == 0) {
      const char *v = s + nl, *ve = eol;
      while (v < ve && (*v == ' ' || *v == '\t')) v++;
      while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t')) ve--;
      *vlen = (size_t)(ve - v);
      return v;
    }
    line = eol;
  }
  return NULL;
}

static void reply_error(struct conn *c, const char *status) {
  char buf[256];
  int n = snprintf(buf, sizeof buf, "HTTP/1.1 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", status);
  send_bytes(c, buf, (size_t)n);
  c->close_after = 1;
  if (c->out_len == c->out_off) c->dead = 1;
}

// Answer every complete request in c->in, in order; stop at a stream (the next request
// waits until it ended) or when more bytes are needed.
static void handle_input(struct conn *c) {
  size_t used = 0;
  while (!c->streaming && !c->dead && !c->close_after) {
    const char *p = c->in + used;
    size_t n = c->in_len - used;
    const char *end = find(p, n, "\r\n\r\n");
    if (!end) {
      if (n > 65536) reply_error(c, "431 Request Header Fields Too Large");
      break;
    }
    size_t head_len = (size_t)(end - p) + 4, vlen;
    const char *v;
    long clen = 0;
    if ((v = header(p, head_len, "transfer-encoding:", &vlen))) {
      reply_error(c, "501 Not Implemented");  // proxies send Content-Length; say so if not
      break;
    }
    if ((v = header(p, head_len, "content-length:", &vlen))) {
      clen = strtol(v, NULL, 10);
      if (clen < 0 || clen > IN_MAX) { reply_error(c, "413 Content Too Large"); break; }
    }
    if (n < head_len + (size_t)clen) break;
    if ((v = header(p, head_len, "connection:", &vlen)) && vlen == 5 && strncasecmp(v, "close", 5) == 0)
      c->close_after = 1;
    const char *body = p + head_len, *eol = memchr(p, '\n', head_len);
    size_t line_len = (size_t)(eol - p);
    used += head_len + (size_t)clen;

    if (line_len >= 12 && memcmp(p, "GET /healthz", 12) == 0) {
      static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
      send_bytes(c, ok, sizeof ok - 1);
    } else if (json_true(body, (size_t)clen, "\"stream\"")) {
      long e = knob(body, (size_t)clen, "events="), d = knob(body, (size_t)clen, "delay_ms=");
      if (e < 0) e = knob(p, line_len, "events=");
      if (d < 0) d = knob(p, line_len, "delay_ms=");
      c->events = e < 0 ? default_events : e < 3 ? 3 : e > MAX_EVENTS ? MAX_EVENTS : (int)e;
      c->delay_ns = d < 0 ? default_delay_ns : d * 1000000;
      c->usage = json_true(body, (size_t)clen, "\"include_usage\"");
      c->whole = c->delay_ns == 0 && knob(body, (size_t)clen, "whole=") == 1;
      start_stream(c);
    } else {
      send_bytes(c, json_reply, json_reply_len);
    }
    if (c->close_after && !c->streaming && c->out_len == c->out_off) c->dead = 1;
  }
  if (used) {
    memmove(c->in, c->in + used, c->in_len - used);
    c->in_len -= used;
  }
}

// ---- connections -----------------------------------------------------------------------

static void close_conn(struct conn *c) {
  if (c->heap_idx >= 0) heap_remove(c);
  close(c->fd);
  free(c->in);
  free(c->out);
  free(c);
}

static void on_readable(struct conn *c) {
  for (;;) {
    if (c->in_len == c->in_cap) {
      if (c->in_cap >= IN_MAX + 65536) { reply_error(c, "413 Content Too Large"); return; }
      c->in_cap *= 2;
      c->in = xrealloc(c->in, c->in_cap);
    }
    ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
    if (r > 0) {
      c->in_len += (size_t)r;
      if (c->in_len < c->in_cap) break;  // drained the socket
      continue;
    }
    if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) { c->dead = 1; return; }
    break;
  }
  handle_input(c);
}

static void on_accept(int lfd) {
  for (;;) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) fprintf(stderr, "sse_upstream: accept: %s\n", strerror(errno));
      return;
    }
    int one = 1;
    // Events are small separate writes: Nagle would hold each until the previous is acked.
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct conn *c = calloc(1, sizeof *c);
    if (!c) { perror("calloc"); exit(1); }
    c->fd = fd;
    c->heap_idx = -1;
    c->in_cap = IN_CAP0;
    c->in = xmalloc(c->in_cap);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) { close_conn(c); continue; }
  }
}

static void usage(void) {
  fprintf(stderr, "usage: sse_upstream --port P [--host 127.0.0.1] [--events 21] [--delay-ms 0]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *host = "127.0.0.1";
  int port = 0;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) usage();
    if (!strcmp(argv[i], "--port")) port = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--host")) host = argv[i + 1];
    else if (!strcmp(argv[i], "--events")) default_events = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--delay-ms")) default_delay_ns = (int64_t)atoi(argv[i + 1]) * 1000000;
    else usage();
  }
  if (port <= 0 || port > 65535 || default_events < 3 || default_events > MAX_EVENTS || default_delay_ns < 0) usage();
  render();

  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (lfd < 0 || inet_pton(AF_INET, host, &sa.sin_addr) != 1) { perror("socket/address"); return 1; }
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 65535) < 0) { perror("bind/listen"); return 1; }

  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigprocmask(SIG_BLOCK, &mask, NULL);
  int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  ep = epoll_create1(EPOLL_CLOEXEC);
  if (sfd < 0 || tfd < 0 || ep < 0) { perror("signalfd/timerfd/epoll"); return 1; }
  // Listener, timer and signals are told apart from connections by these tags.
  static char tag_listen, tag_timer, tag_signal;
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &tag_listen};
  epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  ev.data.ptr = &tag_timer;
  epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
  ev.data.ptr = &tag_signal;
  epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);

  struct epoll_event evs[256];
  for (;;) {
    int n = epoll_wait(ep, evs, 256, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      perror("epoll_wait");
      return 1;
    }
    for (int i = 0; i < n; i++) {
      void *tag = evs[i].data.ptr;
      if (tag == &tag_signal) return 0;
      if (tag == &tag_listen) { on_accept(lfd); continue; }
      if (tag == &tag_timer) { on_timer(); continue; }
      struct conn *c = tag;
      if (c->dead) continue;
      if (evs[i].events & (EPOLLERR | EPOLLHUP)) c->dead = 1;
      if (!c->dead && (evs[i].events & EPOLLOUT)) {
        flush_out(c);
        if (!c->dead && c->out_len == c->out_off && c->close_after && !c->streaming) c->dead = 1;
      }
      if (!c->dead && (evs[i].events & EPOLLIN)) on_readable(c);
      bury(c);
    }
    for (size_t i = 0; i < graveyard_len; i++) close_conn(graveyard[i]);
    graveyard_len = 0;
    arm_timer();
  }
}
