/* Who may connect: the producer's and the consumer's CURVE setters (docs/security.md). The
 * channel reads and checks the key files; the engines only keep the paths until start. */
#include <errno.h>

#include "engine/consumer_internal.h"
#include "engine/producer_internal.h"

int
tsock_producer_set_curve(tsock_producer *p, const char *server_secret_key_file,
                         const char *authorized_keys)
{
    if (!p)
        return -EINVAL;
    if (p->state != TSOCK__P_CREATED)
        return TSOCK_E_STATE;
    return tsock__channel_security_set(&p->security, 1, server_secret_key_file, authorized_keys);
}

int
tsock_producer_set_insecure(tsock_producer *p, int open_to_network)
{
    if (!p)
        return -EINVAL;
    if (p->state != TSOCK__P_CREATED)
        return TSOCK_E_STATE;
    p->security.insecure_network = open_to_network != 0;
    return 0;
}

int
tsock_consumer_set_curve(tsock_consumer *c, const char *client_secret_key_file,
                         const char *server_public_key_file)
{
    if (!c)
        return -EINVAL;
    if (c->started)
        return TSOCK_E_STATE;
    return tsock__channel_security_set(&c->security, 0, client_secret_key_file,
                                       server_public_key_file);
}
