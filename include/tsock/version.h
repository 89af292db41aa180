/* tsock version: the one source of the version number.
 * The Python binding compares tsock_version() with the version it was written for. */
#ifndef TSOCK_VERSION_H
#define TSOCK_VERSION_H

#define TSOCK_VERSION_MAJOR 0
#define TSOCK_VERSION_MINOR 2
#define TSOCK_VERSION_PATCH 0

/* One integer that orders versions: major * 10000 + minor * 100 + patch. */
#define TSOCK_VERSION_NUMBER                                                                       \
    (TSOCK_VERSION_MAJOR * 10000 + TSOCK_VERSION_MINOR * 100 + TSOCK_VERSION_PATCH)

#define TSOCK_VERSION_STRING "0.2.0"

#endif
