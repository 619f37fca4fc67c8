/*
 * The least a fresh 4 KiB file_system buffer costs when it keeps shmrc's checks, in
 * one process, against the same sequence without them (docs/PERFORMANCE.md, "Where
 * fill 4 KiB and the channel spend above the floor"). Not built by CI: a measurement
 * to rerun by hand,
 *
 *     cc -O2 -o /tmp/fill_checks_floor bench/c/fill_checks_floor.c && /tmp/fill_checks_floor
 *
 * Both sequences make, per buffer, the bound row's system calls (`floor
 * shm_open+fallocate, segment length`): the producer creates a 4,800-byte object
 * (shmrc's segment for 4 KiB: header, 64 holder slots, payload), reserves and maps it
 * and writes it whole; a consumer opens, maps and reads it whole and unmaps it; the
 * producer unlinks and unmaps. The second adds what shmrc does beyond that and why:
 *   producer: getrandom of 24 bytes (the name's nonce and the share key), geteuid
 *             (the user's namespace), fchmod 0600 (the mode whatever the umask);
 *   consumer: geteuid twice (the handle's name, then the file's owner), fstat of the
 *             opened file (owner and length, P2/P4), a CAS of a holder slot word (its
 *             claim), a poll of a pidfd (is the other holder alive, at release).
 * Prints the best of 30 batches of 300 buffers of each, interleaved, in microseconds
 * per buffer, and their ratio.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { LEN = 4800, BATCH = 300, BATCHES = 30 };

static int pidfd = -1;

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static void fail(const char *what) {
  perror(what);
  exit(1);
}

/* One batch; microseconds per buffer. */
static double batch(int checks) {
  char name[64];
  volatile long sink = 0;
  double start = now_ns();
  for (int i = 0; i < BATCH; i++) {
    snprintf(name, sizeof name, "/fill-checks-floor-%d-%d", getpid(), i);
    if (checks) {
      char nonce[24];
      if (getrandom(nonce, sizeof nonce, 0) != sizeof nonce) fail("getrandom");
      sink += geteuid();
    }
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) fail("shm_open");
    if (checks && fchmod(fd, 0600)) fail("fchmod");
    if (ftruncate(fd, LEN) || fallocate(fd, 0, 0, LEN)) fail("reserve");
    char *p = mmap(0, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) fail("mmap");
    close(fd);
    memset(p, 1, LEN);

    if (checks) sink += geteuid() + geteuid();
    int cfd = shm_open(name, O_RDWR | O_CLOEXEC, 0);
    if (cfd < 0) fail("shm_open consumer");
    if (checks) {
      struct stat st;
      if (fstat(cfd, &st)) fail("fstat");
      sink += st.st_size;
    }
    char *q = mmap(0, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, cfd, 0);
    if (q == MAP_FAILED) fail("mmap consumer");
    close(cfd);
    if (checks) __atomic_fetch_add((long *)(q + 136), 1, __ATOMIC_SEQ_CST);
    for (size_t j = 0; j < LEN; j += 64) sink += q[j];
    if (checks) {
      struct pollfd alive = {pidfd, POLLIN, 0};
      if (poll(&alive, 1, 0) < 0) fail("poll");
    }
    munmap(q, LEN);

    if (shm_unlink(name)) fail("shm_unlink");
    munmap(p, LEN);
  }
  return (now_ns() - start) / BATCH / 1000;
}

int main(void) {
  pidfd = (int)syscall(SYS_pidfd_open, getppid(), 0);
  if (pidfd < 0) fail("pidfd_open");
  double plain = 1e18, checked = 1e18;
  for (int r = 0; r < BATCHES; r++) {
    double a = batch(0), b = batch(1);
    if (a < plain) plain = a;
    if (b < checked) checked = b;
  }
  printf("bound's calls %.2f us, with shmrc's checks %.2f us: %.3fx\n", plain, checked,
         checked / plain);
  return 0;
}
