/* JSON syntax checking (RFC 8259), for application text the library passes on verbatim inside
 * JSON of its own. Internal to libtsock; pure, no allocation. */
#ifndef TSOCK_JSON_H
#define TSOCK_JSON_H

#include <stddef.h>

/* Deepest nesting of arrays and objects accepted: keeps the recursion bounded. */
#define TSOCK__JSON_MAX_DEPTH 32

/* Whether s[0, len) is exactly one JSON object, optionally surrounded by white space, nested at
 * most TSOCK__JSON_MAX_DEPTH deep. Bytes 0x80..0xFF inside strings pass unchecked: check UTF-8
 * separately where it matters. */
int tsock__json_is_object(const char *s, size_t len);

#endif
