/* Makes TFF's worker_binary listen on one address instead of all of them.
 *
 * TFF 0.87's worker_binary serves its executors on "[::]:<port>" (every
 * interface, IPv4 and IPv6) and has no flag for the address. A worker runs
 * whatever serialized TensorFlow graph a client sends it, over plain,
 * unauthenticated gRPC, so anyone who can reach the port can read and write
 * the user's files. tff_nlp starts every worker with this library in
 * LD_PRELOAD (tff_nlp/runtime/bind_address.py builds it) and the address in
 * TFF_NLP_WORKER_BIND_ADDRESS: a bind() to the wildcard address (0.0.0.0 or
 * ::) becomes a bind() to that address; any other bind() is left alone.
 *
 * An IPv4 address on an IPv6 socket (gRPC's dual-stack "[::]") becomes its
 * IPv4-mapped form (::ffff:127.0.0.1): the socket then accepts IPv4
 * connections to that address only. An IPv6 address on an IPv4 socket
 * cannot be expressed: that bind() fails with EAFNOSUPPORT (gRPC then uses
 * its IPv6 socket). An unparsable address fails every wildcard bind() with
 * EADDRNOTAVAIL, so a typo never falls back to listening everywhere.
 *
 * The cost is one getenv() and a comparison per bind(), which a worker calls
 * once, at start-up.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static int is_wildcard(const struct sockaddr *addr, socklen_t len) {
  if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
    return ((const struct sockaddr_in *)addr)->sin_addr.s_addr ==
           htonl(INADDR_ANY);
  }
  if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
    return memcmp(&((const struct sockaddr_in6 *)addr)->sin6_addr,
                  &in6addr_any, sizeof(struct in6_addr)) == 0;
  }
  return 0;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
  static bind_fn real_bind = NULL;
  if (real_bind == NULL) real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
  const char *wanted = getenv("TFF_NLP_WORKER_BIND_ADDRESS");
  if (wanted == NULL || *wanted == '\0' || addr == NULL ||
      !is_wildcard(addr, len)) {
    return real_bind(fd, addr, len);
  }
  struct in_addr v4;
  struct in6_addr v6;
  int is_v4 = inet_pton(AF_INET, wanted, &v4) == 1;
  int is_v6 = !is_v4 && inet_pton(AF_INET6, wanted, &v6) == 1;
  if (!is_v4 && !is_v6) {
    errno = EADDRNOTAVAIL;
    return -1;
  }
  if (addr->sa_family == AF_INET) {
    if (!is_v4) {
      errno = EAFNOSUPPORT;
      return -1;
    }
    struct sockaddr_in bound;
    memcpy(&bound, addr, sizeof(bound));
    bound.sin_addr = v4;
    return real_bind(fd, (const struct sockaddr *)&bound, sizeof(bound));
  }
  struct sockaddr_in6 bound;
  memcpy(&bound, addr, sizeof(bound));
  if (is_v4) {  /* ::ffff:a.b.c.d */
    memset(&bound.sin6_addr, 0, sizeof(bound.sin6_addr));
    bound.sin6_addr.s6_addr[10] = 0xff;
    bound.sin6_addr.s6_addr[11] = 0xff;
    memcpy(&bound.sin6_addr.s6_addr[12], &v4, sizeof(v4));
  } else {
    bound.sin6_addr = v6;
  }
  return real_bind(fd, (const struct sockaddr *)&bound, sizeof(bound));
}
